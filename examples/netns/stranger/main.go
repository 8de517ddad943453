// Command stranger plays a host on the job's network that does not belong
// to the job (examples/netns/netns-test.sh): it tries the job's control
// ports with a wrong secret or none, and floods them with garbage.
//
//	stranger -refuse ADDR,...            one handshake per address with a wrong secret and one with none:
//	                                     each must be refused within 1 s (exit 1 otherwise)
//	stranger -flood ADDR,... -n 1000     n connections, 64 at a time: random bytes, truncated
//	                                     frames, oversized length prefixes, silence
//	stranger -gather HEX,... -calls 5    gather requests with a random gather key to fabric
//	                                     addresses (tcp;ofi_rxm on -iface): each must get no
//	                                     data (exit 1 otherwise)
package main

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/engine/auth"
	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
)

func main() {
	refuse := flag.String("refuse", "", "addresses to try with a wrong secret and with none")
	flood := flag.String("flood", "", "addresses to flood")
	n := flag.Int("n", 1000, "flood: connections in all")
	limit := flag.Duration("limit", time.Second, "refuse: longest acceptable time to refusal")
	gather := flag.String("gather", "", "fabric addresses (hex, as the trainer's --print-fabric-addr prints them) to send gather requests to")
	calls := flag.Int("calls", 5, "gather: requests per address")
	iface := flag.String("iface", "eth0", "gather: the interface of the stranger's endpoint")
	gatherTimeout := flag.Duration("gather-timeout", time.Second, "gather: how long each request waits for an answer")
	flag.Parse()
	bad := false
	if *gather != "" && !gatherAll(strings.Split(*gather, ","), *calls, *iface, *gatherTimeout) {
		bad = true
	}
	if *refuse != "" {
		for _, a := range strings.Split(*refuse, ",") {
			for _, s := range [][]byte{[]byte("a-stranger-guessing-0123456789"), nil} {
				took, err := try(a, s)
				verdict := "refused"
				switch {
				case err == nil:
					verdict, bad = "ADMITTED", true
				case !errors.Is(err, fault.ErrToken) && !errors.Is(err, fault.ErrCorrupt):
					verdict, bad = "not refused cleanly", true
				case took > *limit:
					verdict, bad = "refused too late", true
				}
				fmt.Printf("stranger: %s secret=%v: %s in %v (%v)\n", a, s != nil, verdict, took.Round(time.Millisecond), err)
			}
		}
	}
	if *flood != "" {
		floodAll(strings.Split(*flood, ","), *n)
	}
	if bad {
		os.Exit(1)
	}
}

// try runs the handshake as a dialler with secret s; it returns how long the
// peer took to answer it.
func try(addr string, s []byte) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	err = auth.Handshake(c, s, true, time.Now().Add(10*time.Second))
	return time.Since(start), err
}

func floodAll(addrs []string, n int) {
	var sent, failed atomic.Int64
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c, err := net.DialTimeout("tcp", addrs[i%len(addrs)], 2*time.Second)
			if err != nil {
				failed.Add(1)
				return
			}
			defer c.Close()
			sent.Add(1)
			c.SetDeadline(time.Now().Add(3 * time.Second))
			switch i % 5 {
			case 0: // random bytes
				b := make([]byte, 1+i%4096)
				rand.Read(b)
				c.Write(b)
			case 1: // a truncated auth hello
				c.Write([]byte(auth.Magic + "\x01\x01" + "short"))
			case 2: // an oversized length prefix, as a rendezvous or mesh frame would start
				var h [13]byte
				binary.LittleEndian.PutUint32(h[:], 0xfffffff0)
				h[4] = 1
				c.Write(h[:])
			case 3: // a valid auth hello claiming no secret, then garbage
				h := auth.Hello{Version: auth.Version}
				c.Write(append(h.Encode(), make([]byte, 64)...))
			case 4: // silence
			}
			c.Read(make([]byte, 256)) // until the peer closes, or the deadline
		}()
	}
	wg.Wait()
	fmt.Printf("stranger: flood of %d connections to %v: %d made, %d could not connect, %v\n",
		n, addrs, sent.Load(), failed.Load(), time.Since(start).Round(time.Millisecond))
}

// gatherAll sends calls gather requests of one 3 KB row to each address
// with a random gather key (a stranger does not know the job's), and
// reports whether none got data.
func gatherAll(addrs []string, calls int, iface string, timeout time.Duration) bool {
	var k [8]byte
	rand.Read(k[:])
	o := fabric.Options{Provider: "tcp;ofi_rxm", Domain: iface, GatherKey: binary.LittleEndian.Uint64(k[:]) | 1, Timeout: timeout}
	ok := true
	for _, a := range addrs {
		addr, err := hex.DecodeString(a)
		if err != nil {
			fmt.Printf("stranger: gather address %q: %v\n", a, err)
			return false
		}
		tries, err := fabric.TryGather(o, addr, 0, 0, 3072, calls)
		if err != nil {
			fmt.Printf("stranger: gather to %s: could not try: %v\n", a, err)
			return false
		}
		dropped := 0
		for _, g := range tries {
			if g.OK || !g.Untouched {
				ok = false
				fmt.Printf("stranger: gather to %s: GOT DATA (%v)\n", a, g)
			} else {
				dropped++
			}
		}
		fmt.Printf("stranger: gather to %s: %d of %d requests unanswered (timed out after %v, destination untouched)\n", a, dropped, len(tries), timeout)
	}
	return ok
}
