package auth

import (
	"net"
	"testing"
	"time"
)

// BenchmarkConnect is one loopback TCP connection with and without the
// handshake: its cost beside what the mesh and rendezvous pay anyway.
func BenchmarkConnect(b *testing.B) {
	for _, secret := range []struct {
		name string
		s    []byte
	}{{"plain", nil}, {"auth", secretA}} {
		b.Run(secret.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					if secret.s != nil {
						Handshake(c, secret.s, false, time.Now().Add(5*time.Second))
					}
					c.Write([]byte{1})
					c.Close()
				}
			}()
			one := make([]byte, 1)
			for b.Loop() {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				if secret.s != nil {
					if err := Handshake(c, secret.s, true, time.Now().Add(5*time.Second)); err != nil {
						b.Fatal(err)
					}
				}
				c.Read(one)
				c.Close()
			}
		})
	}
}
