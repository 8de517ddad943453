package fabric

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/internal/testkit"
)

func isNoProvider(err error) bool {
	return errors.Is(err, fault.ErrNoProvider) || errors.Is(err, fault.ErrNoDomain)
}

// setup opens a fabric and a reader and starts one target as rank 1.
func setup(t *testing.T, o Options, size int, busy bool) (*Fabric, *Reader, *target, Peer) {
	t.Helper()
	_, f, r, tg, p := setupRank(t, o, 0, size, busy, 1)
	return f, r, tg, p
}

// setupRank is setup with the target as rank and, unless timeout is 0,
// o.Timeout set to timeout; it returns the options used too.
func setupRank(t *testing.T, o Options, timeout time.Duration, size int, busy bool, rank int) (Options, *Fabric, *Reader, *target, Peer) {
	t.Helper()
	if timeout != 0 {
		o.Timeout = timeout * testkit.RaceScale
	}
	f := openOrSkip(t, o)
	r, tgs, peers := readerWith(t, f, o, size, busy, rank)
	return o, f, r, tgs[0], peers[0]
}

// readerWith starts one target of size bytes per rank, its region salted
// with that rank, opens a reader on f (closed at cleanup) and adds the
// targets as peers of those ranks.
func readerWith(t *testing.T, f *Fabric, o Options, size int, busy bool, ranks ...int) (*Reader, []*target, []Peer) {
	t.Helper()
	tgs := make([]*target, len(ranks))
	for k := range ranks {
		tgs[k] = startSaltedTarget(t, o, size, busy, uint64(ranks[k]))
	}
	r, err := f.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	peers := make([]Peer, len(ranks))
	for k, rank := range ranks {
		if peers[k], err = r.AddPeer(rank, tgs[k].addr); err != nil {
			t.Fatal(err)
		}
	}
	return r, tgs, peers
}

// readChecked reads ops with read, failing with what, and checks every row
// against the pattern at its offset in its peer's target, salted as that
// target's.
func readChecked(t *testing.T, what string, read func([]ReadOp) (Timing, error), ops []ReadOp, tgs []*target, peers []Peer) {
	t.Helper()
	for i := range ops {
		ops[i].DoneNs = -1
	}
	t0 := time.Now()
	if _, err := read(ops); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	took := time.Since(t0)
	checkOps(t, what, ops, tgs, peers)
	// Every op has its completion time, inside the call (chunks of up
	// to 4096 ops each start their own clock).
	for i, op := range ops {
		if op.DoneNs <= 0 || op.DoneNs > int64(took) {
			t.Fatalf("%s: op %d completed at %d ns, the call took %v", what, i, op.DoneNs, took)
		}
	}
}

// allocDsts returns a heap and an off-heap destination of size bytes, by
// name; the off-heap one is freed at cleanup.
func allocDsts(t *testing.T, size int) map[string][]byte {
	t.Helper()
	off, err := Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { off.Free() })
	return map[string][]byte{"heap": make([]byte, size), "offheap": off.Bytes()}
}

// strideOps reads n rows of row bytes of tg, 7 rows apart, into dst.
func strideOps(dst []byte, row, n int, p Peer, tg *target) []ReadOp {
	ops := make([]ReadOp, n)
	for i := range ops {
		ops[i] = ReadOp{Dst: dst[i*row : (i+1)*row], Peer: p, Addr: tg.base + uint64((i*7)%(tg.size/row))*uint64(row), Key: tg.key}
	}
	return ops
}

// noAllocs fails unless fn, run 50 times, succeeds and allocates nothing.
func noAllocs(t *testing.T, what string, fn func() error) {
	t.Helper()
	var rerr error
	allocs := testing.AllocsPerRun(50, func() {
		if err := fn(); err != nil {
			rerr = err
		}
	})
	if rerr != nil {
		t.Fatal(rerr)
	}
	if allocs != 0 {
		t.Fatalf("%s allocates %v times per call", what, allocs)
	}
}

// killRig is a reader with a 64 MiB victim target as rank 7, a 64 MiB live
// target as rank 8, and off-heap dst for the n rows of row bytes of one.
type killRig struct {
	o             Options
	r             *Reader
	victim, alive *target
	pv, pa        Peer
	dst           *Memory
	row, n        int
}

func newKillRig(t *testing.T, f *Fabric, o Options, row int) *killRig {
	t.Helper()
	r, tgs, peers := readerWith(t, f, o, 64<<20, false, 7, 8)
	k := &killRig{o: o, r: r, victim: tgs[0], alive: tgs[1], pv: peers[0], pa: peers[1], row: row, n: (64 << 20) / row}
	dst, err := Alloc(k.n * row)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dst.Free() })
	k.dst = dst
	return k
}

// ops reads every row of tg into the rows of dst, reps times over.
func (k *killRig) ops(p Peer, tg *target, reps int) []ReadOp {
	ops := make([]ReadOp, 0, reps*k.n)
	for j := 0; j < reps; j++ {
		for i := 0; i < k.n; i++ {
			ops = append(ops, ReadOp{Dst: k.dst.Bytes()[i*k.row : (i+1)*k.row], Peer: p, Addr: tg.base + uint64(i*k.row), Key: tg.key})
		}
	}
	return ops
}

// deadPeerErr reports whether err is what a read of a dead or unreachable
// peer must fail with: a remote ErrPeerDead or ErrTimeout naming rank.
func deadPeerErr(err error, rank int) bool {
	return fault.IsRemote(err) && fault.RankOf(err) == rank && (errors.Is(err, fault.ErrPeerDead) || errors.Is(err, fault.ErrTimeout))
}

// readKilled kills the victim 50ms into read(big): the read must fail
// within the deadline naming peer 7. It returns the error.
func (k *killRig) readKilled(t *testing.T, what string, read func([]ReadOp) (Timing, error), big []ReadOp) error {
	t.Helper()
	go func() {
		time.Sleep(50 * time.Millisecond)
		k.victim.kill()
	}()
	start := time.Now()
	_, err := read(big)
	el := time.Since(start)
	if err == nil {
		t.Fatalf("%s from a killed target succeeded in %v", what, el)
	}
	if fault.RankOf(err) != 7 || !fault.IsRemote(err) || !strings.Contains(err.Error(), "rank 7, remote") {
		t.Fatalf("error does not name peer 7: %v", err)
	}
	if el > k.o.Timeout+deadlineSlack {
		t.Fatalf("took %v, deadline %v", el, k.o.Timeout)
	}
	t.Logf("killed target: %v after %v", err, el)
	return err
}

func TestReadPattern(t *testing.T) {
	for _, pc := range provCases {
		t.Run(pc.name, func(t *testing.T) {
			f, r, tg, p := setup(t, pc.opts, targetMiB<<20, false)
			inf := f.Info()
			if inf.MRVirtAddr != (tg.base != 0) {
				t.Fatalf("MRVirtAddr=%v but target base %#x", inf.MRVirtAddr, tg.base)
			}
			rng := rand.New(rand.NewSource(1))
			off, err := Alloc(32 << 20)
			if err != nil {
				t.Fatal(err)
			}
			defer off.Free()
			for _, row := range []int{3072, 12800, 204800, 1048576} {
				nrows := tg.size / row
				// Single reads into Go memory.
				buf := make([]byte, row)
				for i := 0; i < 8; i++ {
					idx := uint64(rng.Intn(nrows))
					tm, err := r.Read(ReadOp{Dst: buf, Peer: p, Addr: tg.base + idx*uint64(row), Key: tg.key})
					if err != nil {
						t.Fatalf("row %d (%d B): %v", idx, row, err)
					}
					if tm.Post <= 0 {
						t.Fatalf("no post time: %+v", tm)
					}
					if err := tg.check(buf, tg.base+idx*uint64(row)); err != nil {
						t.Fatalf("single read row %d (%d B): %v", idx, row, err)
					}
				}
				// Batches into Go memory and into off-heap memory.
				n := 32
				heap := make([]byte, n*row)
				for _, dst := range [][]byte{heap, off.Bytes()[:n*row]} {
					ops := gatherOps(rng, dst, row, n, []Peer{p}, []*target{tg})
					readChecked(t, fmt.Sprintf("batch of %d B rows", row), r.ReadBatch, ops, []*target{tg}, []Peer{p})
				}
			}
		})
	}
}

func TestBusyTarget(t *testing.T) {
	for _, pc := range provCases {
		t.Run(pc.name, func(t *testing.T) {
			_, r, tg, p := setup(t, pc.opts, 64<<20, true)
			const row, total, batch = 3072, 10000, 5000 // batches span two chunks
			rng := rand.New(rand.NewSource(2))
			dst := make([]byte, batch*row)
			start := time.Now()
			for done := 0; done < total; done += batch {
				ops := gatherOps(rng, dst, row, batch, []Peer{p}, []*target{tg})
				readChecked(t, fmt.Sprintf("after %d rows", done), r.ReadBatch, ops, []*target{tg}, []Peer{p})
			}
			t.Logf("%d rows of %d B from a busy target in %v", total, row, time.Since(start))
		})
	}
}

// deadlineSlack is how late past its deadline a failing call may return in
// these tests: on a loaded 2-core machine the caller can be descheduled and
// the endpoint's teardown after the deadline takes a second or more
// (make test-stress saw 4.05 s for a 3 s deadline). A hang is what the
// checks catch. Stretched under the race detector, as the deadlines are.
const deadlineSlack = 5 * time.Second * testkit.RaceScale

func TestKilledTarget(t *testing.T) {
	for _, pc := range provCases {
		t.Run(pc.name, func(t *testing.T) {
			o := pc.opts
			o.Timeout = 3 * time.Second * testkit.RaceScale
			f := openOrSkip(t, o)
			k := newKillRig(t, f, o, 1<<20) // 64 rows in the 64 MiB region
			r := k.r
			readChecked(t, "before kill", r.ReadBatch, k.ops(k.pv, k.victim, 1), []*target{k.victim}, []Peer{k.pv})
			big := k.ops(k.pv, k.victim, 40) // 2560 MiB: far longer than the kill delay
			if err := k.readKilled(t, "batch", r.ReadBatch, big); !deadPeerErr(err, 7) {
				t.Fatalf("killed peer: want a remote dead-peer or timeout error naming rank 7, got %v", err)
			}
			// Again: must fail within the deadline, not hang, as a dead peer.
			start := time.Now()
			_, err := r.Read(ReadOp{Dst: k.dst.Bytes()[:4096], Peer: k.pv, Addr: k.victim.base, Key: k.victim.key})
			if !deadPeerErr(err, 7) || time.Since(start) > o.Timeout+deadlineSlack {
				t.Fatalf("second read of dead peer: want a remote dead-peer or timeout error naming rank 7, got %v after %v", err, time.Since(start))
			}
			t.Logf("second read of dead peer: %v after %v", err, time.Since(start))
			// The reader still works with the live peer, unless a call stuck
			// inside the provider (shm, under load) got it quarantined: then a
			// new reader does.
			ops, pa := k.ops(k.pa, k.alive, 1)[:8], k.pa
			if r.quarantined {
				t.Logf("reader quarantined by the kill: reading the live peer with a new reader")
				r2, err := f.NewReader()
				if err != nil {
					t.Fatal(err)
				}
				defer r2.Close()
				if pa, err = r2.AddPeer(8, k.alive.addr); err != nil {
					t.Fatal(err)
				}
				for i := range ops {
					ops[i].Peer = pa
				}
				r = r2
			}
			readChecked(t, "live peer after failure", r.ReadBatch, ops, []*target{k.alive}, []Peer{pa})
		})
	}
}

func TestBadOptions(t *testing.T) {
	_, err := Open(Options{Provider: "no-such-provider"})
	if !errors.Is(err, fault.ErrNoProvider) || !strings.Contains(err.Error(), "available:") || !strings.Contains(err.Error(), "no-such-provider") {
		t.Fatalf("unknown provider: %v", err)
	}
	t.Log(err)
	_, err = Open(Options{Provider: "tcp;ofi_rxm", Domain: "nosuch0"})
	if errors.Is(err, fault.ErrNoProvider) {
		skipOrRequire(t, "%v", err)
	}
	if !errors.Is(err, fault.ErrNoDomain) || !strings.Contains(err.Error(), "lo") || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("unknown domain: %v", err)
	}
	t.Log(err)
	for _, o := range []Options{{Window: -1}, {Timeout: -time.Second}, {MaxPeers: -2}, {Window: chunkOps + 1},
		{GatherMaxBytes: 100}, {GatherMaxBytes: maxGatherBytes + 1}, {GatherRounds: -1}, {GatherRounds: maxGatherRounds + 1}} {
		if err := o.Validate(); !errors.Is(err, fault.ErrInvalid) {
			t.Fatalf("Validate(%+v) = %v", o, err)
		}
		if _, err := Open(o); !errors.Is(err, fault.ErrInvalid) {
			t.Fatalf("Open(%+v) = %v", o, err)
		}
	}
	// Default order and the short alias.
	fd, err := Open(Options{})
	if err != nil {
		t.Fatalf("default provider: %v", err)
	}
	if !contains(defaultOrder, fd.Info().Provider) {
		t.Fatalf("default provider %q not in %v", fd.Info().Provider, defaultOrder)
	}
	fd.Close()
	fa, err := Open(Options{Provider: "tcp", Domain: "lo"})
	if err != nil {
		t.Fatalf("alias tcp: %v", err)
	}
	if inf := fa.Info(); inf.Provider != "tcp;ofi_rxm" || inf.Domain != "lo" {
		t.Fatalf("alias tcp/lo opened %s/%s", inf.Provider, inf.Domain)
	}
	fa.Close()
	if _, err := Alloc(0); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("Alloc(0) = %v", err)
	}
	f := openOrSkip(t, Options{Provider: "tcp;ofi_rxm", Domain: "lo"})
	if _, err := f.Export(nil); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "zero-length") {
		t.Fatalf("Export(nil) = %v", err)
	}
	r, err := f.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Read(ReadOp{Dst: make([]byte, 8)}); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("zero Peer: %v", err)
	}
	p, err := r.AddPeer(3, f.Address())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ReadOp{Peer: p}); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "rank 3") {
		t.Fatalf("empty Dst: %v", err)
	}
	if _, err := r.AddPeer(4, nil); !errors.Is(err, fault.ErrInvalid) {
		t.Fatalf("empty address: %v", err)
	}
}

// A read the target's provider refuses fails with the provider's text and
// the peer's rank, and the reader recovers. tcp checks keys; shm reads with
// CMA and checks no keys, so there the read targets an unmapped address.
func TestRefusedRead(t *testing.T) {
	for _, pc := range provCases {
		t.Run(pc.name, func(t *testing.T) {
			_, f, r, tg, p := setupRank(t, pc.opts, 3*time.Second, 1<<20, false, 5)
			buf := make([]byte, 4096)
			bad := ReadOp{Dst: buf, Peer: p, Addr: tg.base, Key: tg.key + 12345}
			if f.Info().MRVirtAddr {
				bad = ReadOp{Dst: buf, Peer: p, Addr: 4096, Key: tg.key}
			}
			start := time.Now()
			_, err := r.Read(bad)
			if err == nil {
				t.Fatalf("refused read %+v succeeded", bad)
			}
			if !fault.IsRemote(err) || fault.RankOf(err) != 5 || !strings.Contains(err.Error(), "rank 5") {
				t.Fatalf("refused read: %v", err)
			}
			if errors.Is(err, fault.ErrTimeout) {
				t.Fatalf("refused read timed out instead of failing: %v", err)
			}
			t.Logf("%v (after %v)", err, time.Since(start))
			if _, err := r.Read(ReadOp{Dst: buf, Peer: p, Addr: tg.base + 4096, Key: tg.key}); err != nil {
				t.Fatalf("good read after refused read: %v", err)
			}
			if err := tg.check(buf, tg.base+4096); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestReadBatchAllocs(t *testing.T) {
	for _, pc := range provCases {
		t.Run(pc.name, func(t *testing.T) {
			_, r, tg, p := setup(t, pc.opts, 16<<20, false)
			const row, n = 3072, 64
			for name, dst := range allocDsts(t, n*row) {
				ops := strideOps(dst, row, n, p, tg)
				noAllocs(t, name+": ReadBatch", func() error {
					_, err := r.ReadBatch(ops)
					return err
				})
				single := ops[0]
				noAllocs(t, name+": Read", func() error {
					_, err := r.Read(single)
					return err
				})
				for i := range ops {
					if err := tg.check(ops[i].Dst, ops[i].Addr); err != nil {
						t.Fatalf("%s row %d: %v", name, i, err)
					}
				}
			}
		})
	}
}

// Every exit of a batch read, the validation failures included, leaves no
// Go pointer (dst) and no gather skip flag in the C op array, and no caller
// Dst in the reader's big-row list.
func TestErrorPathsClearOps(t *testing.T) {
	o := provCases[0].opts // tcp: software RMA, so ReadGather gathers
	o.GatherMaxBytes = 4096
	f, r, tg, p := setup(t, o, 1<<20, false)
	const n = 16
	buf := make([]byte, n*8192)
	mk := func(bad int, bigEvery int) []ReadOp {
		ops := make([]ReadOp, n)
		for i := range ops {
			row := 1024
			if bigEvery > 0 && i%bigEvery == 0 {
				row = 8192 // larger than GatherMaxBytes: goes to r.big
			}
			ops[i] = ReadOp{Dst: buf[i*8192 : i*8192+row], Peer: p, Addr: tg.base + uint64(i*8192), Key: tg.key}
		}
		switch {
		case bad < 0:
		case bad%2 == 0:
			ops[bad].Peer = Peer{} // invalid peer
		default:
			ops[bad].Dst = nil // empty Dst
		}
		return ops
	}
	check := func(what string) {
		t.Helper()
		for i := range chunkOps {
			if r.ops[i].dst != nil || r.ops[i].skip != 0 {
				t.Fatalf("%s: C op %d keeps dst %p skip %d after the call returned", what, i, r.ops[i].dst, r.ops[i].skip)
			}
		}
		if len(r.big) != 0 {
			t.Fatalf("%s: %d big rows left in the reader", what, len(r.big))
		}
		for i, op := range r.big[:cap(r.big)] {
			if op.Dst != nil {
				t.Fatalf("%s: big-row slot %d still holds a caller's Dst", what, i)
			}
		}
	}
	for _, bad := range []int{5, 10, 15} {
		if _, err := r.ReadBatch(mk(bad, 0)); !errors.Is(err, fault.ErrInvalid) {
			t.Fatalf("ReadBatch with bad op %d: %v, want fault.ErrInvalid", bad, err)
		}
		check("ReadBatch validation failure")
		if f.Info().SoftwareRMA {
			if _, err := r.ReadGather(mk(bad, 3)); !errors.Is(err, fault.ErrInvalid) {
				t.Fatalf("ReadGather with bad op %d: %v, want fault.ErrInvalid", bad, err)
			}
			check("ReadGather validation failure")
		}
	}
	// A refused gather entry (C-side failure) and the success paths too.
	ops := mk(-1, 3)
	ops[4].Key += 999
	if _, err := r.ReadGather(ops); !errors.Is(err, fault.ErrRejected) || fault.RankOf(err) != 1 || !strings.Contains(err.Error(), "op 4:") {
		t.Fatalf("ReadGather with a bad key in op 4: %v, want fault.ErrRejected naming rank 1 and op 4", err)
	}
	check("ReadGather refused")
	for _, read := range []func([]ReadOp) (Timing, error){r.ReadBatch, r.ReadGather} {
		ops := mk(-1, 3)
		for i := range ops {
			clear(ops[i].Dst)
		}
		if _, err := read(ops); err != nil {
			t.Fatal(err)
		}
		check("success")
		for i := range ops {
			if err := tg.check(ops[i].Dst, ops[i].Addr); err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
		}
	}
}

// TestLocalMRCache forces the FI_MR_LOCAL path (no provider here needs it)
// with Options.RegisterDst and checks that reads stay correct and
// registrations are bounded, released and counted.
func TestLocalMRCache(t *testing.T) {
	o := Options{Provider: "tcp;ofi_rxm", Domain: "lo"}
	f := openOrSkip(t, Options{Provider: o.Provider, Domain: o.Domain, RegisterDst: true})
	tg := startTarget(t, o, 16<<20, false)
	base := liveLocalMRs.Load()
	r, p := readerOf(t, f, tg)
	const row, n = 12800, 16
	var mems []*Memory
	for k := 0; k < mrCacheSize+4; k++ {
		m, err := Alloc(n * row)
		if err != nil {
			t.Fatal(err)
		}
		mems = append(mems, m)
	}
	heap := make([]byte, n*row)
	read := func(dst []byte, first int) Timing {
		t.Helper()
		ops := make([]ReadOp, n)
		for i := range ops {
			ops[i] = ReadOp{Dst: dst[i*row : (i+1)*row], Peer: p, Addr: tg.base + uint64((first+i)*row), Key: tg.key}
		}
		tm, err := r.ReadBatch(ops)
		if err != nil {
			t.Fatal(err)
		}
		if tm.MR <= 0 {
			t.Fatalf("no MR time with local registration: %+v", tm)
		}
		for i := range ops {
			if err := tg.check(ops[i].Dst, ops[i].Addr); err != nil {
				t.Fatal(err)
			}
		}
		return tm
	}
	for k, m := range mems {
		// Timing.Regs counts registrations: a Memory once, then cached;
		// Go heap every call.
		if tm := read(m.Bytes(), k); tm.Regs != 1 {
			t.Fatalf("first read into Memory %d: %d registrations, want 1", k, tm.Regs)
		}
		if tm := read(m.Bytes(), k); tm.Regs != 0 {
			t.Fatalf("second read into Memory %d: %d registrations, want 0 (cached)", k, tm.Regs)
		}
		if tm := read(heap, k+1); tm.Regs < 1 {
			t.Fatalf("read into the Go heap: %d registrations, want >= 1", tm.Regs)
		}
		if live := liveLocalMRs.Load() - base; live > mrCacheSize {
			t.Fatalf("%d local registrations live, cache holds %d", live, mrCacheSize)
		}
	}
	if live := liveLocalMRs.Load() - base; live != mrCacheSize {
		t.Fatalf("%d local registrations live, want a full cache of %d", live, mrCacheSize)
	}
	mems[len(mems)-1].Free()
	read(heap, 3) // notices the Free and drops that registration
	if live := liveLocalMRs.Load() - base; live != mrCacheSize-1 {
		t.Fatalf("%d local registrations live after Free, want %d", live, mrCacheSize-1)
	}
	r.Close()
	if live := liveLocalMRs.Load() - base; live != 0 {
		t.Fatalf("%d local registrations leaked after Close", live)
	}
	for _, m := range mems {
		m.Free()
	}
}

// An idle fabric's progress goroutine sleeps: it wakes rarely (tcp: on its
// wait fd only; shm: back-off capped at 2ms, then 10ms once idle).
func TestIdleProgress(t *testing.T) {
	for _, pc := range provCases {
		t.Run(pc.name, func(t *testing.T) {
			f := openOrSkip(t, pc.opts)
			// The bound per window of el: with a wait fd an idle rank never
			// wakes (a few stray wakeups allowed). Without one it sleeps
			// 10 ms at a time once idle for 200 ms; a costly step (a cold
			// cache after preemption) buys one quick second look, so even
			// when every step is costly it wakes at most twice per 10 ms.
			// A loop stuck in the active back-off (2 ms) wakes 5 times per
			// 10 ms, a spinning one thousands of times: both fail.
			limit := func(el time.Duration) uint64 {
				if f.Info().WaitFD {
					return 10
				}
				return 2*uint64(el/(10*time.Millisecond)) + 4
			}
			// Two costly steps in a row on a loaded machine count as work and
			// restart the 200 ms before the idle sleep, so a single window
			// may see the active rate; the rank is idle when some window
			// within the deadline stays at the idle bound.
			const window = 300 * time.Millisecond
			deadline := time.Now().Add(15 * time.Second)
			time.Sleep(250 * time.Millisecond)
			var last string
			for {
				w0, t0 := f.ProgressWakeups(), time.Now()
				time.Sleep(window)
				w, el := f.ProgressWakeups()-w0, time.Since(t0)
				if w <= limit(el) {
					t.Logf("%d wakeups in %v idle (limit %d); info %+v", w, el, limit(el), f.Info())
					return
				}
				last = fmt.Sprintf("%d wakeups in %v (limit %d)", w, el, limit(el))
				if time.Now().After(deadline) {
					t.Fatalf("no idle window in 15 s: last %s; info %+v", last, f.Info())
				}
			}
		})
	}
}

// A stopped target (SIGSTOP) never answers: the batch must fail at its
// deadline naming the peer, with the endpoint torn down so that nothing
// lands in Dst after return, even once the target resumes and the reader
// progresses again. On shm the reader may instead be inside fi_read,
// spinning on the stopped target's lock: then the watchdog abandons the
// call and quarantines the reader (fabric's doc: its buffers are kept and
// may still be written), and a new reader reads once the target resumes.
func TestStoppedTarget(t *testing.T) {
	for _, pc := range provCases {
		t.Run(pc.name, func(t *testing.T) {
			o, f, r, tg, p := setupRank(t, pc.opts, 2*time.Second, 64<<20, false, 9)
			q0 := QuarantinedReaders()
			const row = 12800
			dst, ops := readThenStop(t, r, tg, p, row, 4000)
			resumed := false
			defer func() {
				if !resumed {
					tg.cmd.Process.Signal(syscall.SIGCONT)
				}
			}()
			for i := range dst {
				dst[i] = 0xAB
			}
			start := time.Now()
			_, err := r.ReadBatch(ops)
			el := time.Since(start)
			if err == nil {
				t.Fatalf("batch from a stopped target succeeded in %v", el)
			}
			if !errors.Is(err, fault.ErrTimeout) || !fault.IsRemote(err) || fault.RankOf(err) != 9 || !strings.Contains(err.Error(), "rank 9") {
				t.Fatalf("want a timeout naming peer 9, got %v", err)
			}
			if el < o.Timeout || el > o.Timeout+deadlineSlack {
				t.Fatalf("returned after %v, deadline %v", el, o.Timeout)
			}
			t.Logf("%v after %v", err, el)
			quarantined := strings.Contains(err.Error(), "quarantined")
			if q := QuarantinedReaders() - q0; quarantined != (q == 1) || q > 1 {
				t.Fatalf("error says quarantined %v, readers quarantined %d: %v", quarantined, q, err)
			}
			if quarantined && pc.name != "shm" {
				t.Fatalf("%s reader quarantined: only shm spins in fi_read on a stopped peer: %v", pc.name, err)
			}
			snap := append([]byte(nil), dst...)
			tg.cmd.Process.Signal(syscall.SIGCONT)
			resumed = true
			if quarantined {
				r2, err := f.NewReader()
				if err != nil {
					t.Fatal(err)
				}
				defer r2.Close()
				if p, err = r2.AddPeer(9, tg.addr); err != nil {
					t.Fatal(err)
				}
				r = r2
			}
			other := make([]byte, 16*row)
			ops2 := make([]ReadOp, 16)
			for i := range ops2 {
				ops2[i] = ReadOp{Dst: other[i*row : (i+1)*row], Peer: p, Addr: tg.base + uint64(i*row), Key: tg.key}
			}
			if _, err := r.ReadBatch(ops2); err != nil {
				t.Fatalf("after resume: %v", err)
			}
			for i := range ops2 {
				if err := tg.check(ops2[i].Dst, ops2[i].Addr); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(50 * time.Millisecond)
			if !quarantined && !bytes.Equal(snap, dst) {
				t.Fatal("Dst of the timed-out batch changed after ReadBatch returned")
			}
		})
	}
}

// TestLocalFailureIsLocal injects a registration failure (FI_MR_LOCAL
// forced, fi_mr_reg failing): the error names the peer the op was for, but
// says the failure is local, so that nobody marks the healthy peer dead;
// the same reader then reads from that peer once registration works again.
func TestLocalFailureIsLocal(t *testing.T) {
	o := Options{Provider: "tcp;ofi_rxm", Domain: "lo", Timeout: 5 * time.Second}
	f := openOrSkip(t, o)
	f.forceLocalMR = true
	r, tgs, peers := readerWith(t, f, o, 1<<20, false, 4)
	dst := make([]byte, 4096)
	op := ReadOp{Dst: dst, Peer: peers[0], Addr: tgs[0].base + 8192, Key: tgs[0].key}
	f.failLocalMR = true
	_, err := r.Read(op)
	f.failLocalMR = false
	if err == nil {
		t.Fatal("read with a failing registration succeeded")
	}
	var fe *fault.Error
	if !errors.As(err, &fe) || !fault.IsLocal(err) || fault.IsRemote(err) || errors.Is(err, fault.ErrPeerDead) ||
		fault.RankOf(err) != 4 || fe.Op != "fi_mr_reg(local)" || !strings.Contains(err.Error(), "Cannot allocate memory") {
		t.Fatalf("want a local fi_mr_reg error naming rank 4, got %v (side %v)", err, fault.SideOf(err))
	}
	t.Logf("%v", err)
	readChecked(t, "after the local failure", r.ReadBatch, []ReadOp{op}, tgs, peers)
}

// TestPeerDeadCutsReadShort: a batch waiting on a stopped target (tcp)
// fails as soon as the target's rank is declared dead (Fabric.PeerDead, as
// the engine does when the control plane finds it dead), with ErrPeerDead
// naming it, long before the deadline; nothing lands in Dst afterwards,
// even once the target resumes; a later batch for that rank fails at once,
// while one for another rank of the same reader reads.
func TestPeerDeadCutsReadShort(t *testing.T) {
	o := Options{Provider: "tcp;ofi_rxm", Domain: "lo", Timeout: 30 * time.Second * testkit.RaceScale}
	f := openOrSkip(t, o)
	r, tgs, peers := readerWith(t, f, o, 8<<20, false, 9, 4)
	tg, p := tgs[0], peers[0]
	const row = 12800
	dst, ops := readThenStop(t, r, tg, p, row, 600)
	defer tg.cmd.Process.Signal(syscall.SIGCONT)
	for i := range dst {
		dst[i] = 0xAB
	}
	const after = 300 * time.Millisecond
	go func() { time.Sleep(after); f.PeerDead(9) }()
	start := time.Now()
	_, err := r.ReadBatch(ops)
	el := time.Since(start)
	if !errors.Is(err, fault.ErrPeerDead) || fault.RankOf(err) != 9 || !strings.Contains(err.Error(), "declared dead") {
		t.Fatalf("after %v: %v, want ErrPeerDead naming rank 9, declared dead", el, err)
	}
	if el < after || el > o.Timeout/3 {
		t.Fatalf("the batch failed %v after it began; rank 9 was declared dead after %v (deadline %v)", el, after, o.Timeout)
	}
	t.Logf("%v after %v", err, el)
	snap := append([]byte(nil), dst...)
	tg.cmd.Process.Signal(syscall.SIGCONT)
	time.Sleep(100 * time.Millisecond)
	if !bytes.Equal(snap, dst) {
		t.Fatal("Dst of the cut batch changed after ReadBatch returned")
	}
	start = time.Now()
	if _, err := r.ReadBatch(ops[:4]); !errors.Is(err, fault.ErrPeerDead) || fault.RankOf(err) != 9 {
		t.Fatalf("a later batch for rank 9: %v, want ErrPeerDead naming it", err)
	}
	if el := time.Since(start); el > o.Timeout/3 {
		t.Fatalf("a later batch for rank 9 failed after %v", el)
	}
	other := make([]byte, 16*row)
	ops2 := make([]ReadOp, 16)
	for i := range ops2 {
		ops2[i] = ReadOp{Dst: other[i*row : (i+1)*row], Peer: peers[1], Addr: tgs[1].base + uint64(i*row), Key: tgs[1].key}
	}
	if _, err := r.ReadBatch(ops2); err != nil {
		t.Fatalf("rank 4, alive, after rank 9 was declared dead: %v", err)
	}
	for i := range ops2 {
		if err := tgs[1].check(ops2[i].Dst, ops2[i].Addr); err != nil {
			t.Fatal(err)
		}
	}
}

// readThenStop builds n reads of row bytes scattered over tg (one Dst),
// reads the first 16 (the connection is up), then stops tg (SIGSTOP; the
// caller resumes it).
func readThenStop(t *testing.T, r *Reader, tg *target, p Peer, row, n int) ([]byte, []ReadOp) {
	t.Helper()
	nrows := tg.size / row
	dst := make([]byte, n*row)
	ops := make([]ReadOp, n)
	for i := range ops {
		ops[i] = ReadOp{Dst: dst[i*row : (i+1)*row], Peer: p, Addr: tg.base + uint64((i*31)%nrows*row), Key: tg.key}
	}
	if _, err := r.ReadBatch(ops[:16]); err != nil {
		t.Fatal(err)
	}
	if err := tg.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	return dst, ops
}

// TestAddPeers: three targets inserted with one AddPeers (one
// fi_av_insert) read their own rows, also after a teardown (inserted
// again); an empty address is refused naming its rank, and nothing of that
// call is added (the next peer gets the next id); the address vector's
// bound holds for a batch.
func TestAddPeers(t *testing.T) {
	for _, pc := range provCases {
		t.Run(pc.name, func(t *testing.T) {
			o := pc.opts
			o.Timeout = 10 * time.Second * testkit.RaceScale
			f := openOrSkip(t, o)
			ranks := []int{7, 8, 9}
			tgs := make([]*target, len(ranks))
			for k, rank := range ranks { // each salted with its rank: a read sent to another peer fails its check
				tgs[k] = startSaltedTarget(t, o, 1<<20, false, uint64(rank))
			}
			r, err := f.NewReader()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			addrs := [][]byte{tgs[0].addr, tgs[1].addr, tgs[2].addr}
			if _, err := r.AddPeers(ranks, addrs[:2]); !errors.Is(err, fault.ErrInvalid) {
				t.Fatalf("3 ranks, 2 addresses: %v, want ErrInvalid", err)
			}
			if _, err := r.AddPeers(ranks, [][]byte{tgs[0].addr, nil, tgs[2].addr}); !errors.Is(err, fault.ErrInvalid) || fault.RankOf(err) != 8 {
				t.Fatalf("no address for rank 8: %v, want ErrInvalid naming rank 8", err)
			}
			calls := avInserts.Load()
			peers, err := r.AddPeers(ranks, addrs)
			if err != nil {
				t.Fatal(err)
			}
			want := uint64(1) // shm's addresses (names with the pid) may differ in length: one call each
			if len(addrs[0]) != len(addrs[1]) || len(addrs[1]) != len(addrs[2]) {
				want = 3
			}
			if n := avInserts.Load() - calls; n != want {
				t.Fatalf("3 peers with addresses of %d, %d, %d bytes took %d fi_av_insert calls, want %d",
					len(addrs[0]), len(addrs[1]), len(addrs[2]), n, want)
			}
			for k, p := range peers {
				if p.id != uint32(k+1) {
					t.Fatalf("peer %d has id %d, want %d (refused calls add nothing)", k, p.id, k+1)
				}
			}
			const row = 4096
			for round := range 2 { // the second after a teardown: the peers go in again
				for k, p := range peers {
					dst := make([]byte, 8*row)
					ops := make([]ReadOp, 8)
					for i := range ops {
						ops[i] = ReadOp{Dst: dst[i*row : (i+1)*row], Peer: p, Addr: tgs[k].base + uint64((i*5+k)*row), Key: tgs[k].key}
					}
					if _, err := r.ReadBatch(ops); err != nil {
						t.Fatalf("round %d, rank %d: %v", round, ranks[k], err)
					}
					for i := range ops {
						if err := tgs[k].check(ops[i].Dst, ops[i].Addr); err != nil {
							t.Fatalf("round %d, rank %d, op %d: %v", round, ranks[k], i, err)
						}
					}
				}
				ddReaderTeardown(r.c)
				r.broken = true
			}
			many := make([][]byte, f.avCount)
			mranks := make([]int, f.avCount)
			for i := range many {
				many[i], mranks[i] = tgs[0].addr, 100+i
			}
			if _, err := r.AddPeers(mranks, many); !errors.Is(err, fault.ErrInvalid) || !strings.Contains(err.Error(), "address vector full") {
				t.Fatalf("%d more peers than the vector holds: %v", len(many)+3-f.avCount, err)
			}

			// One at a time, as the engine's first read from each peer adds
			// it: after Reserve, AddPeer allocates nothing, and each peer
			// reads its own rows.
			r2, err := f.NewReader()
			if err != nil {
				t.Fatal(err)
			}
			defer r2.Close()
			r2.Reserve(len(tgs))
			added := make([]Peer, 0, len(tgs))
			var addErr error
			if a := testing.AllocsPerRun(len(tgs)-1, func() { // a warm-up run, then the rest
				p, err := r2.AddPeer(ranks[len(added)], tgs[len(added)].addr)
				if err != nil {
					addErr = err
				}
				added = append(added, p) // within the capacity made below
			}); a != 0 || addErr != nil || len(added) != len(tgs) {
				t.Fatalf("AddPeer after Reserve: %v allocations per call, %d peers, err %v", a, len(added), addErr)
			}
			for k, p := range added {
				dst := make([]byte, row)
				if _, err := r2.Read(ReadOp{Dst: dst, Peer: p, Addr: tgs[k].base + uint64(k*row), Key: tgs[k].key}); err != nil {
					t.Fatalf("peer %d added alone: %v", ranks[k], err)
				}
				if err := tgs[k].check(dst, tgs[k].base+uint64(k*row)); err != nil {
					t.Fatalf("peer %d added alone: %v", ranks[k], err)
				}
			}
		})
	}
}
