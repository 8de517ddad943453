package mesh

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/auth"
	"github.com/ddstore/ddstore/fault"
)

// listenAll opens n ranks' listeners (Connect not yet called).
func listenAll(t *testing.T, n int, o Options, perRank func(r int, o *Options)) ([]*Mesh, []Addr) {
	t.Helper()
	ms := make([]*Mesh, n)
	addrs := make([]Addr, n)
	for r := range n {
		oo := o
		oo.Rank, oo.World, oo.Token, oo.Secret, oo.Bind = r, n, "tok", testSecret, "127.0.0.1"
		if perRank != nil {
			perRank(r, &oo)
		}
		m, a, err := Listen(oo)
		if err != nil {
			t.Fatal(err)
		}
		ms[r], addrs[r] = m, a
	}
	t.Cleanup(func() {
		for _, m := range ms {
			m.Close()
		}
	})
	return ms, addrs
}

func connectAll(ms []*Mesh, addrs []Addr) []error {
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for r := range ms {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = ms[r].Connect(addrs) }()
	}
	wg.Wait()
	return errs
}

// A rank with another job's secret is refused by the rank it dials (it
// learns why: ErrToken naming that rank) and never joins.
func TestMeshWrongSecretRefused(t *testing.T) {
	ms, addrs := listenAll(t, 2, Options{Timeout: 3 * time.Second}, func(r int, o *Options) {
		if r == 1 {
			o.Secret = []byte("another-jobs-secret-0123456")
		}
	})
	errs := connectAll(ms, addrs)
	if !errors.Is(errs[1], fault.ErrToken) || fault.RankList(fault.RanksOf(errs[1])) != "rank 0" {
		t.Fatalf("rank 1: %v, want ErrToken naming rank 0", errs[1])
	}
	if !errors.Is(errs[0], fault.ErrTimeout) || fault.RankList(fault.RanksOf(errs[0])) != "rank 1" {
		t.Fatalf("rank 0: %v, want ErrTimeout naming rank 1", errs[0])
	}
	if ms[0].Refused() < 1 {
		t.Fatalf("rank 0 counted %d refusals", ms[0].Refused())
	}
}

// stranger connects to addr and does one kind of mischief; it returns how
// long until the rank closed on it or refused it, and the handshake error
// for the secret-bearing kinds.
func stranger(addr string, kind int) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	switch kind % 5 {
	case 0: // a wrong secret
		return time.Since(start), auth.Handshake(c, []byte("not-the-secret-0123456789"), true, time.Now().Add(5*time.Second))
	case 1: // no secret at all
		return time.Since(start), auth.Handshake(c, nil, true, time.Now().Add(5*time.Second))
	case 2: // random bytes
		b := make([]byte, 1+kind%300)
		rand.Read(b)
		c.Write(b)
	case 3: // an oversized length prefix (a mesh or rendezvous frame of 1 GiB)
		var h [hdrLen]byte
		binary.LittleEndian.PutUint32(h[:], 1<<30)
		h[4] = tHello
		c.Write(h[:])
	case 4: // a truncated auth hello, then silence
		c.Write([]byte(auth.Magic + "\x01"))
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	c.Read(make([]byte, 64))
	return time.Since(start), nil
}

// Strangers flood every rank's mesh port while the ranks connect: wrong
// and missing secrets are refused within 1 s, the ranks connect anyway and
// their collectives are intact.
func TestMeshStrangersDuringConnect(t *testing.T) {
	const n, flood = 4, 200
	ms, addrs := listenAll(t, n, Options{Timeout: 30 * time.Second}, nil)
	var wg sync.WaitGroup
	type refusal struct {
		took time.Duration
		err  error
	}
	refusals := make(chan refusal, flood)
	for i := range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := addrs[i%n]
			took, err := stranger(net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port)), i)
			if i%5 <= 1 {
				refusals <- refusal{took, err}
			}
		}()
	}
	errs := connectAll(ms, addrs)
	wg.Wait()
	close(refusals)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for f := range refusals {
		// A stranger may also have come after its rank closed the
		// listener (connection refused) or found the gate full (EOF).
		if f.err == nil {
			t.Fatalf("a stranger passed the handshake")
		}
		if errors.Is(f.err, fault.ErrToken) && f.took > time.Second {
			t.Errorf("stranger refused after %v, want ≤ 1s", f.took)
		}
	}
	var refused int64
	for _, m := range ms {
		refused += m.Refused()
	}
	if refused == 0 {
		t.Fatal("no stranger was refused")
	}
	t.Logf("refused %d strangers", refused)
	blob := func(r int) []byte { return []byte(strconv.Itoa(r*7919) + "-payload") }
	outs := make([][][]byte, n)
	gerrs := each(ms, func(r int, m *Mesh) error {
		var err error
		outs[r], err = m.AllGather("after-flood", blob(r), 20*time.Second)
		return err
	})
	for r := range ms {
		if gerrs[r] != nil {
			t.Fatalf("rank %d: %v", r, gerrs[r])
		}
		for p, b := range outs[r] {
			if string(b) != string(blob(p)) {
				t.Fatalf("rank %d: rank %d's blob %q", r, p, b)
			}
		}
	}
}

// A stranger is refused at once even while the rank has not yet called
// Connect (it still waits for the launcher's exchange).
func TestMeshRefusesBeforeConnect(t *testing.T) {
	ms, addrs := listenAll(t, 2, Options{Timeout: 5 * time.Second}, nil)
	_ = ms
	start := time.Now()
	_, err := stranger(net.JoinHostPort("127.0.0.1", strconv.Itoa(addrs[0].Port)), 0)
	if !errors.Is(err, fault.ErrToken) || time.Since(start) > time.Second {
		t.Fatalf("stranger before Connect: %v after %v, want ErrToken within 1s", err, time.Since(start))
	}
}
