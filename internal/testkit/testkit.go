// Package testkit owns helpers that the tests of several packages share:
// fuzz input mutation, a scripted net.Conn for fuzzing wire decoders, the
// TestMain of a test binary that re-executes itself, and running a function
// as concurrent ranks (Each). It imports nothing of ddstore's, so any
// package's tests may use it; no library code does.
package testkit

import (
	"bytes"
	"encoding/binary"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// Each runs f(0), …, f(n-1) concurrently, as the ranks of an in-process
// job, and returns their errors by index once all have returned.
func Each(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(i) }()
	}
	wg.Wait()
	return errs
}

// Mutate returns a copy of b changed by muts, a fuzzer's bytes: each 3
// bytes {pos u16 little-endian, xor u8} flip bits at pos modulo len+1 (at
// len it appends the byte); each of the last 1 or 2 bytes c then cuts
// cut*(c%8) bytes off the end.
func Mutate(b, muts []byte, cut int) []byte {
	b = append([]byte(nil), b...)
	for ; len(muts) >= 3; muts = muts[3:] {
		p := int(binary.LittleEndian.Uint16(muts)) % (len(b) + 1)
		if p == len(b) {
			b = append(b, muts[2])
		} else {
			b[p] ^= muts[2]
		}
	}
	for _, c := range muts {
		b = b[:max(0, len(b)-cut*int(c%8))]
	}
	return b
}

// Main is the TestMain of a test binary that re-executes itself as child
// processes: where the environment variable env is set, this process is a
// child and exits with run(its value); otherwise it runs the tests.
func Main(m *testing.M, env string, run func(value string) int) {
	if v := os.Getenv(env); v != "" {
		os.Exit(run(v))
	}
	os.Exit(m.Run())
}

// ScriptConn is a net.Conn whose reads come from a fixed input and whose
// writes are dropped: a peer that says exactly a fuzzer's bytes. Unread
// reports how many input bytes the code under test left unread.
type ScriptConn struct{ r *bytes.Reader }

// NewScriptConn returns a ScriptConn that reads in.
func NewScriptConn(in []byte) *ScriptConn { return &ScriptConn{r: bytes.NewReader(in)} }

// Unread is the number of input bytes not yet read.
func (s *ScriptConn) Unread() int { return s.r.Len() }

func (s *ScriptConn) Read(b []byte) (int, error)       { return s.r.Read(b) }
func (s *ScriptConn) Write(b []byte) (int, error)      { return len(b), nil }
func (s *ScriptConn) Close() error                     { return nil }
func (s *ScriptConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (s *ScriptConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (s *ScriptConn) SetDeadline(time.Time) error      { return nil }
func (s *ScriptConn) SetReadDeadline(time.Time) error  { return nil }
func (s *ScriptConn) SetWriteDeadline(time.Time) error { return nil }
