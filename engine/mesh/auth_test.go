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
	"github.com/ddstore/ddstore/internal/testkit"
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

// strangerKinds is the number of kinds of mischief stranger knows.
const strangerKinds = 7

// refuseLimit bounds how long a rank may take to refuse a wrong secret:
// the goal is 1 s, plus 3 s of slack for a loaded 2-core machine, times
// testkit.RaceScale.
const refuseLimit = (1*time.Second + 3*time.Second) * testkit.RaceScale

// stranger connects to addr and does one kind of mischief; it returns how
// long until the rank closed on it or refused it, the handshake error for
// the secret-bearing kinds, and what ended its wait for the rank to close
// the connection (a timeout: the rank never did). Kinds 2 and 3 send at
// least an auth hello's worth (38 bytes) of junk, so that the gate reads
// and refuses them at once; kind 4 sends less and waits for the gate's
// timeout; kinds 5 and 6 know the secret and are refused above the
// handshake, by the mesh's hello (its 64 KiB cap, the job token).
func stranger(addr string, kind int) (time.Duration, error, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second*testkit.RaceScale)
	if err != nil {
		return 0, err, nil
	}
	defer c.Close()
	start := time.Now()
	hsDeadline := time.Now().Add(2 * refuseLimit)
	switch kind % strangerKinds {
	case 0: // a wrong secret
		return time.Since(start), auth.Handshake(c, []byte("not-the-secret-0123456789"), true, hsDeadline), nil
	case 1: // no secret at all
		return time.Since(start), auth.Handshake(c, nil, true, hsDeadline), nil
	case 2: // random bytes, at least an auth hello long, not its magic
		b := make([]byte, auth.HelloLen+kind%300)
		rand.Read(b)
		b[0] = 'X'
		c.Write(b)
	case 3: // an oversized length prefix (a mesh or rendezvous frame of 1 GiB), padded to an auth hello's length
		b := make([]byte, auth.HelloLen)
		binary.LittleEndian.PutUint32(b, 1<<30)
		b[4] = tHello
		c.Write(b)
	case 4: // a truncated auth hello, then silence
		c.Write([]byte(auth.Magic + "\x01"))
	case 5: // the secret, then a mesh hello announcing 1 GiB
		if err := auth.Handshake(c, testSecret, true, hsDeadline); err != nil {
			return time.Since(start), err, nil
		}
		var h [hdrLen]byte
		binary.LittleEndian.PutUint32(h[:], 1<<30)
		h[4] = tHello
		c.Write(h[:])
	case 6: // the secret, then another job's mesh hello
		if err := auth.Handshake(c, testSecret, true, hsDeadline); err != nil {
			return time.Since(start), err, nil
		}
		c.Write(helloFrame(1, 2, "another-job"))
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second * testkit.RaceScale))
	buf := make([]byte, 512)
	for {
		if _, err = c.Read(buf); err != nil {
			break
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return time.Since(start), nil, err
	}
	return time.Since(start), nil, nil
}

// One stranger of each kind at a rank that has not yet called Connect:
// every one is refused and counted, exactly (nothing else comes to its
// port yet), and the ranks then connect and gather intact.
func TestMeshStrangersCounted(t *testing.T) {
	const n = 2
	ms, addrs := listenAll(t, n, Options{Timeout: 30 * time.Second, AuthTimeout: 2 * time.Second}, nil)
	var wg sync.WaitGroup
	type outcome struct {
		hs, wait error
	}
	outs := make([]outcome, strangerKinds)
	for k := range strangerKinds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, hs, wait := stranger(net.JoinHostPort("127.0.0.1", strconv.Itoa(addrs[0].Port)), k)
			outs[k] = outcome{hs, wait}
		}()
	}
	wg.Wait()
	for k, o := range outs {
		if o.wait != nil {
			t.Errorf("stranger of kind %d: rank 0 never closed its connection: %v", k, o.wait)
		}
		switch {
		case k <= 1 && !errors.Is(o.hs, fault.ErrToken):
			t.Errorf("stranger of kind %d: %v, want ErrToken", k, o.hs)
		case k >= 5 && o.hs != nil:
			t.Errorf("stranger of kind %d with the secret: %v", k, o.hs)
		}
	}
	// A rank counts a refusal just after it closed the connection: wait
	// for the count, then require it exact.
	for deadline := time.Now().Add(10 * time.Second * testkit.RaceScale); ms[0].Refused() < strangerKinds && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := ms[0].Refused(); got != strangerKinds {
		t.Fatalf("rank 0 refused %d connections, want its %d strangers", got, strangerKinds)
	}
	if got := ms[1].Refused(); got != 0 {
		t.Fatalf("rank 1, which no stranger met, refused %d connections", got)
	}
	for r, err := range connectAll(ms, addrs) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	gatherChecked(t, ms, "after-strangers", 1, 20*time.Second*testkit.RaceScale)
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
			took, err, _ := stranger(net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port)), i)
			if i%strangerKinds <= 1 {
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
		if errors.Is(f.err, fault.ErrToken) && f.took > refuseLimit {
			t.Errorf("stranger refused after %v, want ≤ %v", f.took, refuseLimit)
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
	gatherChecked(t, ms, "after-flood", 2, 20*time.Second*testkit.RaceScale)
}

// A stranger is refused at once even while the rank has not yet called
// Connect (it still waits for the launcher's exchange).
func TestMeshRefusesBeforeConnect(t *testing.T) {
	ms, addrs := listenAll(t, 2, Options{Timeout: 5 * time.Second}, nil)
	_ = ms
	start := time.Now()
	_, err, _ := stranger(net.JoinHostPort("127.0.0.1", strconv.Itoa(addrs[0].Port)), 0)
	if took := time.Since(start); !errors.Is(err, fault.ErrToken) || took > refuseLimit {
		t.Fatalf("stranger before Connect: %v after %v, want ErrToken within %v", err, took, refuseLimit)
	}
}
