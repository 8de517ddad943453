package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/internal/testkit"
)

var testSecret = []byte("mesh-test-secret-0123456789")

// world connects n ranks of one process over loopback TCP.
func world(t testing.TB, n int, o Options, perRank ...func(r int, o *Options)) []*Mesh {
	t.Helper()
	ms := make([]*Mesh, n)
	addrs := make([]Addr, n)
	for r := range n {
		oo := o
		oo.Rank, oo.World = r, n
		for _, f := range perRank {
			f(r, &oo)
		}
		if oo.Token == "" {
			oo.Token = "tok"
		}
		if oo.Secret == nil {
			oo.Secret = testSecret
		}
		oo.Bind = "127.0.0.1"
		m, a, err := Listen(oo)
		if err != nil {
			t.Fatal(err)
		}
		ms[r], addrs[r] = m, a
	}
	errs := each(ms, func(r int, m *Mesh) error { return m.Connect(addrs) })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, m := range ms {
			m.Close()
		}
	})
	return ms
}

// each runs f on every rank concurrently and returns the errors.
func each(ms []*Mesh, f func(r int, m *Mesh) error) []error {
	return testkit.Each(len(ms), func(r int) error { return f(r, ms[r]) })
}

func blob(r, k int) []byte {
	b := make([]byte, 1+r*37+k*1000)
	for i := range b {
		b[i] = byte(r*7 + k*13 + i)
	}
	return b
}

// gatherChecked runs AllGather(tag) on every rank with blob(r, k) and
// requires each rank to get every rank's blob, exactly.
func gatherChecked(t *testing.T, ms []*Mesh, tag string, k int, timeout time.Duration) {
	t.Helper()
	res := make([][][]byte, len(ms))
	errs := each(ms, func(r int, m *Mesh) (err error) {
		res[r], err = m.AllGather(tag, blob(r, k), timeout)
		return
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", tag, r, err)
		}
		if len(res[r]) != len(ms) {
			t.Fatalf("%s: rank %d got %d blobs, want %d", tag, r, len(res[r]), len(ms))
		}
		for q, b := range res[r] {
			if !bytes.Equal(b, blob(q, k)) {
				t.Fatalf("%s: rank %d: blob of rank %d wrong (%d bytes)", tag, r, q, len(b))
			}
		}
	}
}

func TestAllGather(t *testing.T) {
	ms := world(t, 5, Options{Timeout: 10 * time.Second})
	for k := range 4 {
		gatherChecked(t, ms, fmt.Sprint("round-", k), k, 0)
	}
	if errs := each(ms, func(r int, m *Mesh) error { return m.Barrier("end", 0) }); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
}

// refSum is segment-wise ring order: element i of segment c is
// ((x_c + x_{c+1}) + …) + x_{c−1}.
func refSum(xs [][]float32, i int) float32 {
	n, l := len(xs), len(xs[0])
	c := SumStart(i, n, l)
	if lo, hi := segment(c, n, l); i < lo || i >= hi {
		panic("SumStart disagrees with segment")
	}
	s := xs[c][i]
	for k := 1; k < n; k++ {
		s += xs[(c+k)%n][i]
	}
	return s
}

func vec(r, l int) []float32 {
	x := make([]float32, l)
	for i := range x {
		// Values of mixed magnitude, so that the order of the sum matters.
		x[i] = float32(math.Sin(float64(i*(r+3)))) * float32(math.Pow(10, float64((i+r)%7-3)))
	}
	return x
}

// vecs is vec of every rank of n, l floats each.
func vecs(n, l int) [][]float32 {
	xs := make([][]float32, n)
	for r := range xs {
		xs[r] = vec(r, l)
	}
	return xs
}

func TestAllReduceBitIdentical(t *testing.T) {
	for _, n := range []int{2, 3, 4, 7} {
		for _, l := range []int{0, 1, 5, 1000, 200_000, 3*PieceBytes/4 + 17} {
			t.Run(fmt.Sprintf("n%d_len%d", n, l), func(t *testing.T) {
				ms := world(t, n, Options{Timeout: 10 * time.Second})
				in := make([][]float32, n)
				out := make([][]float32, n)
				for r := range n {
					in[r] = vec(r, l)
					out[r] = append([]float32(nil), in[r]...)
				}
				errs := each(ms, func(r int, m *Mesh) error { return m.AllReduceFloat32("grad", out[r], 0) })
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				for i := range l {
					want := math.Float32bits(refSum(in, i))
					for r := range n {
						if got := math.Float32bits(out[r][i]); got != want {
							t.Fatalf("rank %d element %d: %08x, want %08x", r, i, got, want)
						}
					}
				}
				// And again: the mesh stays usable.
				errs = each(ms, func(r int, m *Mesh) error { return m.Barrier("after", 0) })
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

func TestMismatch(t *testing.T) {
	ms := world(t, 3, Options{Timeout: 5 * time.Second})
	errs := each(ms, func(r int, m *Mesh) error {
		tag := "a"
		if r == 2 {
			tag = "b"
		}
		_, err := m.AllGather(tag, nil, 0)
		return err
	})
	for r, err := range errs {
		if !errors.Is(err, fault.ErrMismatch) {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	if !strings.Contains(errs[0].Error(), `rank 2 called "b"`) {
		t.Errorf("rank 0: %v", errs[0])
	}
	// Broken from now on, at once.
	if _, err := ms[0].AllGather("c", nil, 0); !errors.Is(err, fault.ErrClosed) || !errors.Is(err, fault.ErrMismatch) {
		t.Errorf("after mismatch: %v", err)
	}

	ms = world(t, 3, Options{Timeout: 5 * time.Second})
	errs = each(ms, func(r int, m *Mesh) error {
		return m.AllReduceFloat32("g", make([]float32, 10+r/2), 0)
	})
	for r, err := range errs {
		if !errors.Is(err, fault.ErrMismatch) || !strings.Contains(err.Error(), "passed") {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// A length mismatch fails alike everywhere and leaves the mesh usable.
	if errs := each(ms, func(r int, m *Mesh) error { return m.AllReduceFloat32("g2", make([]float32, 10), 0) }); errors.Join(errs...) != nil {
		t.Fatal(errs)
	}
}

// A rank that never comes to the collective: the others time out naming it.
func TestTimeoutNamesMissing(t *testing.T) {
	ms := world(t, 4, Options{Timeout: 5 * time.Second})
	start := time.Now()
	errs := each(ms[:3], func(r int, m *Mesh) error { return m.Barrier("b", 2*time.Second) })
	for r, err := range errs {
		if !errors.Is(err, fault.ErrTimeout) || fmt.Sprint(fault.RanksOf(err)) != "[3]" {
			t.Fatalf("rank %d: %v (ranks %v)", r, err, fault.RanksOf(err))
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestLateRankHearsWhoGaveUp: ranks 0-2 give up on a barrier that rank 3
// reaches late. Rank 3 does not complete it (every other rank's part is
// queued for it) nor fails on a broken connection: it hears that the
// others gave up on it, and when. So it does when the others have closed
// their connections meanwhile, as a program that exits on the error does.
func TestLateRankHearsWhoGaveUp(t *testing.T) {
	for _, gone := range []bool{false, true} {
		t.Run(fmt.Sprintf("others-gone=%v", gone), func(t *testing.T) {
			ms := world(t, 4, Options{Timeout: 5 * time.Second})
			errs := each(ms[:3], func(r int, m *Mesh) error { return m.Barrier("b", 300*time.Millisecond) })
			for r, err := range errs {
				if !errors.Is(err, fault.ErrTimeout) {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if gone {
				for _, m := range ms[:3] {
					m.kill()
				}
			}
			// Rank 3 is late: it starts once every other rank's abort
			// frame has reached it.
			for r := range 3 {
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
					if _, _, ok := ms[3].peers[r].in.findAbort(1); ok {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("rank %d's abort frame did not reach rank 3 in 30s", r)
					}
				}
			}
			err := ms[3].Barrier("b", 2*time.Second)
			if !errors.Is(err, fault.ErrTimeout) || !strings.Contains(err.Error(), "gave up on this collective at ") ||
				!strings.Contains(err.Error(), "before this rank got there") || !strings.Contains(err.Error(), "rank 3 did not arrive within 300ms") {
				t.Fatalf("late rank: %v", err)
			}
		})
	}
}

// kill drops a rank's connections without saying goodbye, as a crash does.
func (m *Mesh) kill() {
	m.aborts.Wait() // a crash after the failure: its abort frames are out
	m.closing.Store(true)
	for _, p := range m.peers {
		if p != nil {
			p.conn.Close()
		}
	}
}

func TestDeadPeerCrash(t *testing.T) {
	var deadSeen [4]atomic.Int32
	o := Options{Timeout: 20 * time.Second, Liveness: 2 * time.Second}
	ms := world(t, 4, o, func(r int, o *Options) {
		o.OnDead = func(rank int, err error) {
			if rank == 2 {
				deadSeen[r].Add(1)
			}
		}
	})
	ms[2].kill()
	start := time.Now()
	errs := each(ms, func(r int, m *Mesh) error {
		if r == 2 {
			return nil
		}
		return m.AllReduceFloat32("g", make([]float32, 100000), 0)
	})
	for r, err := range errs {
		if r == 2 {
			continue
		}
		if !errors.Is(err, fault.ErrPeerDead) || fault.SideOf(err) != fault.Remote {
			t.Fatalf("rank %d: %v", r, err)
		}
		if !strings.Contains(err.Error(), "rank 2") {
			t.Errorf("rank %d: error does not name rank 2: %v", r, err)
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v (liveness 2s)", d)
	}
	// A rank may fail on another's abort before its own connection to
	// rank 2 reports the crash: that follows within moments.
	for r := range 4 {
		for end := time.Now().Add(3 * time.Second); r != 2 && !ms[r].Dead(2) && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
		}
		if r != 2 && (!ms[r].Dead(2) || deadSeen[r].Load() != 1) {
			t.Errorf("rank %d: dead(2)=%v, OnDead calls %d", r, ms[r].Dead(2), deadSeen[r].Load())
		}
	}
}

// A rank that stops answering (its heartbeats stop, its connections stay
// open, as behind a cut link) is dead after the liveness deadline.
func TestDeadPeerSilent(t *testing.T) {
	o := Options{Timeout: 30 * time.Second, Liveness: 2 * time.Second}
	dead := make(chan int, 4)
	ms := world(t, 3, o, func(r int, o *Options) {
		if r != 1 {
			o.OnDead = func(rank int, err error) {
				if !errors.Is(err, fault.ErrPeerDead) || !strings.Contains(err.Error(), "silent") {
					t.Errorf("rank %d: cause %v", r, err)
				}
				dead <- rank
			}
		}
	})
	close(ms[1].hbStop) // rank 1 falls silent
	start := time.Now()
	errs := each([]*Mesh{ms[0], ms[2]}, func(r int, m *Mesh) error { return m.Barrier("b", 0) })
	for _, err := range errs {
		if !errors.Is(err, fault.ErrPeerDead) || fault.RankOf(err) != 1 {
			t.Fatalf("err %v", err)
		}
	}
	if d := time.Since(start); d > o.Liveness+time.Second+time.Second {
		t.Errorf("found after %v, liveness %v", d, o.Liveness)
	}
	for range 2 {
		select {
		case r := <-dead:
			if r != 1 {
				t.Errorf("dead rank %d", r)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("OnDead not called within 10 s of the collectives failing")
		}
	}
	ms[1].closing.Store(true)
}

// A clean Close is not a death; a collective that needs the closed rank
// fails naming it.
func TestCloseIsNotDeath(t *testing.T) {
	var deaths atomic.Int32
	ms := world(t, 3, Options{Timeout: 5 * time.Second, Liveness: 2 * time.Second}, func(r int, o *Options) {
		o.OnDead = func(int, error) { deaths.Add(1) }
	})
	ms[2].Close()
	errs := each(ms[:2], func(r int, m *Mesh) error { _, err := m.AllGather("x", nil, 0); return err })
	for _, err := range errs {
		if !errors.Is(err, fault.ErrClosed) || fault.RankOf(err) != 2 {
			t.Fatalf("err %v", err)
		}
	}
	time.Sleep(2500 * time.Millisecond)
	if deaths.Load() != 0 {
		t.Errorf("%d deaths after a clean close", deaths.Load())
	}
}

func TestTokenRefused(t *testing.T) {
	a, aa, err := Listen(Options{Rank: 0, World: 2, Token: "A", Bind: "127.0.0.1", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b, ba, err := Listen(Options{Rank: 1, World: 2, Token: "B", Bind: "127.0.0.1", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); errs[0] = a.Connect([]Addr{aa, ba}) }()
	go func() { defer wg.Done(); errs[1] = b.Connect([]Addr{aa, ba}) }()
	wg.Wait()
	if !errors.Is(errs[1], fault.ErrToken) || fault.RankOf(errs[1]) != 0 {
		t.Errorf("rank 1: %v", errs[1])
	}
	if !errors.Is(errs[0], fault.ErrTimeout) || fault.RankOf(errs[0]) != 1 {
		t.Errorf("rank 0: %v", errs[0])
	}
}

// A rank that leaves right after the last collective does not fail the
// others still finishing it (its frames are queued before its goodbye).
func TestLeaveAfterLastCollective(t *testing.T) {
	for range 10 {
		ms := world(t, 4, Options{Timeout: 5 * time.Second})
		errs := each(ms, func(r int, m *Mesh) error {
			if r == 3 {
				time.Sleep(20 * time.Millisecond)
			}
			got, err := m.AllGather("last", blob(r, 1), 0)
			if err != nil {
				return err
			}
			if len(got) != len(ms) {
				return fmt.Errorf("rank %d got %d blobs", r, len(got))
			}
			for q, b := range got {
				if !bytes.Equal(b, blob(q, 1)) {
					return fmt.Errorf("rank %d got rank %d's blob %x", r, q, b)
				}
			}
			if r == 0 {
				return m.Close()
			}
			time.Sleep(time.Duration(r) * 5 * time.Millisecond)
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
}
