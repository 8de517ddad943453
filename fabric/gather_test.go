package fabric

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"
)

// gatherOps builds n ops of row bytes at random rows of the targets'
// regions (round-robin over the targets, so rounds group by peer), into
// consecutive rows of dst.
func gatherOps(rng *rand.Rand, dst []byte, row, n int, peers []Peer, tgs []*target) []ReadOp {
	ops := make([]ReadOp, n)
	for i := range ops {
		k := i % len(tgs)
		idx := rng.Intn(tgs[k].size / row)
		ops[i] = ReadOp{Dst: dst[i*row : (i+1)*row], Peer: peers[k], Addr: tgs[k].base + uint64(idx*row), Key: tgs[k].key}
	}
	return ops
}

func checkOps(t *testing.T, what string, ops []ReadOp, tgs []*target, peers []Peer) {
	t.Helper()
	for i, op := range ops {
		for k := range peers {
			if op.Peer == peers[k] {
				if err := checkPattern(op.Dst, op.Addr-tgs[k].base); err != nil {
					t.Fatalf("%s: op %d (peer %d): %v", what, i, k, err)
				}
			}
		}
	}
}

func TestGatherPattern(t *testing.T) {
	for _, pc := range provCases {
		for _, maxBytes := range []int{0, 64 << 10} {
			t.Run(fmt.Sprintf("%s/max=%d", pc.name, maxBytes), func(t *testing.T) {
				o := pc.opts
				o.GatherMaxBytes = maxBytes
				f := openOrSkip(t, o)
				soft := f.Info().SoftwareRMA
				if want := pc.name == "tcp"; soft != want {
					t.Fatalf("provider %s: SoftwareRMA %v, want %v", f.Info().Provider, soft, want)
				}
				tgs := []*target{startTarget(t, o, 64<<20, false), startTarget(t, o, 64<<20, false)}
				r, err := f.NewReader()
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				var peers []Peer
				for k, tg := range tgs {
					p, err := r.AddPeer(k+1, tg.addr)
					if err != nil {
						t.Fatal(err)
					}
					peers = append(peers, p)
				}
				off, err := Alloc(64 << 20)
				if err != nil {
					t.Fatal(err)
				}
				defer off.Free()
				rng := rand.New(rand.NewSource(int64(maxBytes) + 7))
				for _, row := range []int{3072, 12800, 204800} {
					for _, n := range []int{1, 9, 128, 300} {
						heap := make([]byte, n*row)
						for _, dst := range [][]byte{heap, off.Bytes()[:n*row]} {
							clear(dst)
							ops := gatherOps(rng, dst, row, n, peers, tgs)
							before := r.gathered
							tm, err := r.ReadGather(ops)
							if err != nil {
								t.Fatalf("row %d n %d: %v", row, n, err)
							}
							checkOps(t, fmt.Sprintf("row %d n %d", row, n), ops, tgs, peers)
							got := r.gathered - before
							want := uint64(n)
							if !soft || row > f.Info().GatherMaxBytes {
								want = 0
							}
							if got != want {
								t.Fatalf("row %d n %d: %d ops served by gather, want %d", row, n, got, want)
							}
							if want > 0 && tm.CQWait <= 0 {
								t.Fatalf("no CQ wait time: %+v", tm)
							}
						}
					}
				}
			})
		}
	}
}

func TestGatherRejected(t *testing.T) {
	o := provCases[0].opts // tcp
	o.Timeout = 3 * time.Second
	f := openOrSkip(t, o)
	if !f.Info().SoftwareRMA {
		t.Skipf("%s has no software RMA", f.Info().Provider)
	}
	tg := startTarget(t, o, 1<<20, false)
	r, err := f.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := r.AddPeer(5, tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	const row = 3072
	buf := make([]byte, 16*row)
	good := func() []ReadOp {
		ops := make([]ReadOp, 16)
		for i := range ops {
			ops[i] = ReadOp{Dst: buf[i*row : (i+1)*row], Peer: p, Addr: tg.base + uint64((3*i+1)*row), Key: tg.key}
		}
		return ops
	}
	cases := []struct {
		name, want string
		mod        func(*ReadOp)
	}{
		{"bad key", "no exported region with key", func(op *ReadOp) { op.Key += 12345 }},
		{"past end", "outside region", func(op *ReadOp) { op.Addr = tg.base + uint64(tg.size) - 100 }},
		{"below base", "outside region", func(op *ReadOp) { op.Addr = tg.base - 1 }},
		{"huge addr", "outside region", func(op *ReadOp) { op.Addr = ^uint64(0) - 10 }},
	}
	if tg.base == 0 {
		cases = cases[:2]
		cases = append(cases, struct {
			name, want string
			mod        func(*ReadOp)
		}{"huge addr", "outside region", func(op *ReadOp) { op.Addr = ^uint64(0) - 10 }})
	}
	for _, c := range cases {
		ops := good()
		c.mod(&ops[11])
		start := time.Now()
		_, err := r.ReadGather(ops)
		if err == nil {
			t.Fatalf("%s: gather succeeded", c.name)
		}
		var fe *Error
		if !errors.As(err, &fe) || fe.Peer != 5 || fe.Index != 11 || !errors.Is(err, ErrRejected) ||
			errors.Is(err, ErrPeer) || errors.Is(err, ErrTimeout) ||
			!strings.Contains(err.Error(), "peer rank 5") || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), "Invalid argument") {
			t.Fatalf("%s: unexpected error %v", c.name, err)
		}
		t.Logf("%s: %v (after %v)", c.name, err, time.Since(start))
		// Reader and target keep working.
		ops = good()
		clear(buf)
		if _, err := r.ReadGather(ops); err != nil {
			t.Fatalf("%s: good gather afterwards: %v", c.name, err)
		}
		checkOps(t, c.name+": good gather afterwards", ops, []*target{tg}, []Peer{p})
	}
}

func TestGatherKilledTarget(t *testing.T) {
	o := provCases[0].opts // tcp
	o.Timeout = 3 * time.Second
	f := openOrSkip(t, o)
	if !f.Info().SoftwareRMA {
		t.Skipf("%s has no software RMA", f.Info().Provider)
	}
	victim := startTarget(t, o, 64<<20, false)
	alive := startTarget(t, o, 64<<20, false)
	r, err := f.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	pv, err := r.AddPeer(7, victim.addr)
	if err != nil {
		t.Fatal(err)
	}
	pa, err := r.AddPeer(8, alive.addr)
	if err != nil {
		t.Fatal(err)
	}
	const row = 204800
	n := (64 << 20) / row
	dst, err := Alloc(n * row)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Free()
	mk := func(p Peer, tg *target, reps int) []ReadOp {
		ops := make([]ReadOp, 0, reps*n)
		for k := 0; k < reps; k++ {
			for i := 0; i < n; i++ {
				ops = append(ops, ReadOp{Dst: dst.Bytes()[i*row : (i+1)*row], Peer: p, Addr: tg.base + uint64(i*row), Key: tg.key})
			}
		}
		return ops
	}
	first := mk(pv, victim, 1)
	if _, err := r.ReadGather(first); err != nil {
		t.Fatalf("before kill: %v", err)
	}
	checkOps(t, "before kill", first, []*target{victim}, []Peer{pv})
	big := mk(pv, victim, 12) // 12 × 64 MiB chunks of gather rounds
	go func() {
		time.Sleep(50 * time.Millisecond)
		victim.kill()
	}()
	start := time.Now()
	_, err = r.ReadGather(big)
	el := time.Since(start)
	if err == nil {
		t.Fatalf("gather from a killed target succeeded in %v", el)
	}
	var fe *Error
	if !errors.As(err, &fe) || fe.Peer != 7 || !strings.Contains(err.Error(), "peer rank 7") {
		t.Fatalf("error does not name peer 7: %v", err)
	}
	if el > o.Timeout+time.Second {
		t.Fatalf("took %v, deadline %v", el, o.Timeout)
	}
	t.Logf("killed target: %v after %v", err, el)
	start = time.Now()
	_, err = r.ReadGather(first[:16])
	if err == nil || time.Since(start) > o.Timeout+time.Second {
		t.Fatalf("second gather from dead peer: err=%v after %v", err, time.Since(start))
	}
	t.Logf("second gather from dead peer: %v after %v", err, time.Since(start))
	ops := mk(pa, alive, 1)[:40]
	clear(dst.Bytes())
	if _, err := r.ReadGather(ops); err != nil {
		t.Fatalf("live peer after failure: %v", err)
	}
	checkOps(t, "live peer after failure", ops, []*target{alive}, []Peer{pa})
}

func TestGatherAllocs(t *testing.T) {
	o := provCases[0].opts // tcp
	_, r, tg, p := setup(t, o, 16<<20, false)
	if !r.f.Info().SoftwareRMA {
		t.Skipf("%s has no software RMA", r.f.Info().Provider)
	}
	const row, n = 3072, 128
	off, err := Alloc(n * row)
	if err != nil {
		t.Fatal(err)
	}
	defer off.Free()
	heap := make([]byte, n*row)
	for name, dst := range map[string][]byte{"heap": heap, "offheap": off.Bytes()} {
		ops := make([]ReadOp, n)
		for i := range ops {
			ops[i] = ReadOp{Dst: dst[i*row : (i+1)*row], Peer: p, Addr: tg.base + uint64((i*7)%(tg.size/row))*row, Key: tg.key}
		}
		var rerr error
		r.ReadGather(ops) // first call allocates the gather state
		allocs := testing.AllocsPerRun(50, func() {
			if _, err := r.ReadGather(ops); err != nil {
				rerr = err
			}
		})
		if rerr != nil {
			t.Fatal(rerr)
		}
		if allocs != 0 {
			t.Fatalf("%s: ReadGather allocates %v times per call", name, allocs)
		}
		clear(dst)
		if _, err := r.ReadGather(ops); err != nil {
			t.Fatal(err)
		}
		checkOps(t, name, ops, []*target{tg}, []Peer{p})
	}
}

// TestGatherBusyTarget: a target whose cores are busy computing still
// answers gathers from its progress thread.
func TestGatherBusyTarget(t *testing.T) {
	_, r, tg, p := setup(t, provCases[0].opts, 16<<20, true)
	if !r.f.Info().SoftwareRMA {
		t.Skipf("%s has no software RMA", r.f.Info().Provider)
	}
	const row, n = 12800, 256
	dst := make([]byte, n*row)
	ops := gatherOps(rand.New(rand.NewSource(3)), dst, row, n, []Peer{p}, []*target{tg})
	for k := 0; k < 4; k++ {
		clear(dst)
		if _, err := r.ReadGather(ops); err != nil {
			t.Fatal(err)
		}
		checkOps(t, "busy target", ops, []*target{tg}, []Peer{p})
	}
	if got := r.GatheredOps(); got != 4*n {
		t.Fatalf("%d ops served by gather, want %d", got, 4*n)
	}
}

// TestGatherConcurrentReaders: several readers, each with its own endpoint,
// gather from one target at once (only some may spin; the others sleep on
// their CQ's wait fd). Every row is checked, and every spin slot is
// released, after successful and after rejected batches.
func TestGatherConcurrentReaders(t *testing.T) {
	o := provCases[0].opts // tcp
	o.Timeout = 5 * time.Second
	f := openOrSkip(t, o)
	if !f.Info().SoftwareRMA {
		t.Skipf("%s has no software RMA", f.Info().Provider)
	}
	tg := startTarget(t, o, 16<<20, false)
	const readers, rounds, row, n = 4, 40, 3072, 64
	errs := make(chan error, readers)
	for w := 0; w < readers; w++ {
		r, err := f.NewReader()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if f.Info().WaitFD && !r.waitFD() {
			t.Fatalf("reader %d: no CQ wait fd although the server's CQ has one", w)
		}
		p, err := r.AddPeer(3, tg.addr)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			errs <- func() error {
				rng := rand.New(rand.NewSource(int64(w) + 11))
				dst := make([]byte, n*row)
				for k := 0; k < rounds; k++ {
					for i := range dst {
						dst[i] = 0xee
					}
					ops := gatherOps(rng, dst, row, n, []Peer{p}, []*target{tg})
					var err error
					if k%4 == 3 {
						_, err = r.ReadBatch(ops)
					} else {
						_, err = r.ReadGather(ops)
					}
					if err != nil {
						return fmt.Errorf("reader %d round %d: %w", w, k, err)
					}
					for i, op := range ops {
						if err := checkPattern(op.Dst, op.Addr-tg.base); err != nil {
							return fmt.Errorf("reader %d round %d op %d: %w", w, k, i, err)
						}
					}
				}
				// A rejected batch fails and still releases its slot.
				ops := gatherOps(rng, dst, row, n, []Peer{p}, []*target{tg})
				ops[5].Key += 777
				if _, err := r.ReadGather(ops); !errors.Is(err, ErrRejected) {
					return fmt.Errorf("reader %d: bad key: got %v, want ErrRejected", w, err)
				}
				return nil
			}()
		}()
	}
	for w := 0; w < readers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := activeReaders(); got != 0 {
		t.Fatalf("%d readers counted active after every batch returned", got)
	}
}
