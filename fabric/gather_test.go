package fabric

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/internal/testkit"
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
				if err := tgs[k].check(op.Dst, op.Addr); err != nil {
					t.Fatalf("%s: op %d (peer %d): %v", what, i, k, err)
				}
			}
		}
	}
}

// openGather opens the tcp fabric with the given timeout and skips the test
// unless it has software RMA (so ReadGather gathers).
func openGather(t *testing.T, timeout time.Duration) (Options, *Fabric) {
	t.Helper()
	o := provCases[0].opts // tcp
	o.Timeout = timeout * testkit.RaceScale
	f := openOrSkip(t, o)
	needSoftRMA(t, f)
	return o, f
}

func needSoftRMA(t *testing.T, f *Fabric) {
	t.Helper()
	if !f.Info().SoftwareRMA {
		t.Skipf("%s has no software RMA", f.Info().Provider)
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
				r, tgs, peers := readerWith(t, f, o, 64<<20, false, 1, 2)
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
	o, f := openGather(t, 3*time.Second)
	r, tgs, peers := readerWith(t, f, o, 1<<20, false, 5)
	tg, p := tgs[0], peers[0]
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
		if fault.RankOf(err) != 5 || !strings.Contains(err.Error(), "op 11:") || !errors.Is(err, fault.ErrRejected) ||
			fault.IsRemote(err) || errors.Is(err, fault.ErrPeerDead) || errors.Is(err, fault.ErrTimeout) ||
			!strings.Contains(err.Error(), "rank 5") || !strings.Contains(err.Error(), c.want) ||
			!strings.Contains(err.Error(), "Invalid argument") {
			t.Fatalf("%s: unexpected error %v", c.name, err)
		}
		t.Logf("%s: %v (after %v)", c.name, err, time.Since(start))
		// Reader and target keep working.
		clear(buf)
		readChecked(t, c.name+": good gather afterwards", r.ReadGather, good(), tgs, peers)
	}
}

func TestGatherKilledTarget(t *testing.T) {
	o, f := openGather(t, 3*time.Second)
	k := newKillRig(t, f, o, 204800)
	r := k.r
	first := k.ops(k.pv, k.victim, 1)
	readChecked(t, "before kill", r.ReadGather, first, []*target{k.victim}, []Peer{k.pv})
	big := k.ops(k.pv, k.victim, 12) // 12 × 64 MiB chunks of gather rounds
	k.readKilled(t, "gather", r.ReadGather, big)
	start := time.Now()
	_, err := r.ReadGather(first[:16])
	if !deadPeerErr(err, 7) || time.Since(start) > o.Timeout+deadlineSlack {
		t.Fatalf("second gather from dead peer: want a remote dead-peer or timeout error naming rank 7, got %v after %v", err, time.Since(start))
	}
	t.Logf("second gather from dead peer: %v after %v", err, time.Since(start))
	ops := k.ops(k.pa, k.alive, 1)[:40]
	clear(k.dst.Bytes())
	readChecked(t, "live peer after failure", r.ReadGather, ops, []*target{k.alive}, []Peer{k.pa})
}

// TestGatherAllocs: a gather with the job's key (target and reader) costs
// no allocation once warm, and reads every row.
func TestGatherAllocs(t *testing.T) {
	o := provCases[0].opts // tcp
	o.GatherKey = 0x5eed5eed5eed
	_, r, tg, p := setup(t, o, 16<<20, false)
	needSoftRMA(t, r.f)
	const row, n = 3072, 128
	for name, dst := range allocDsts(t, n*row) {
		ops := strideOps(dst, row, n, p, tg)
		r.ReadGather(ops) // first call allocates the gather state
		noAllocs(t, name+": ReadGather", func() error {
			_, err := r.ReadGather(ops)
			return err
		})
		clear(dst)
		readChecked(t, name, r.ReadGather, ops, []*target{tg}, []Peer{p})
	}
}

// TestGatherBusyTarget: a target whose cores are busy computing still
// answers gathers from its progress thread.
func TestGatherBusyTarget(t *testing.T) {
	_, r, tg, p := setup(t, provCases[0].opts, 16<<20, true)
	needSoftRMA(t, r.f)
	const row, n = 12800, 256
	dst := make([]byte, n*row)
	ops := gatherOps(rand.New(rand.NewSource(3)), dst, row, n, []Peer{p}, []*target{tg})
	for k := 0; k < 4; k++ {
		clear(dst)
		readChecked(t, "busy target", r.ReadGather, ops, []*target{tg}, []Peer{p})
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
	o, f := openGather(t, 5*time.Second)
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
						if err := tg.check(op.Dst, op.Addr); err != nil {
							return fmt.Errorf("reader %d round %d op %d: %w", w, k, i, err)
						}
					}
				}
				// A rejected batch fails and still releases its slot.
				ops := gatherOps(rng, dst, row, n, []Peer{p}, []*target{tg})
				ops[5].Key += 777
				if _, err := r.ReadGather(ops); !errors.Is(err, fault.ErrRejected) {
					return fmt.Errorf("reader %d: bad key: got %v, want fault.ErrRejected", w, err)
				}
				return nil
			}()
		}()
	}
	// Far beyond what the rounds take on a loaded machine: a reader stuck
	// past every read deadline fails here with a message, not at go test's
	// timeout.
	limit := 60 * time.Second * testkit.RaceScale
	deadline := time.After(limit)
	for w := 0; w < readers; w++ {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			tg.kill()
			t.Fatalf("%d of %d readers still reading after %v: target killed", readers-w, readers, limit)
		}
	}
	if got := activeReaders(); got != 0 {
		t.Fatalf("%d readers counted active after every batch returned", got)
	}
}

// TestGatherDirect reads one peer's records of varied sizes into
// destinations laid out the ways ReadGather meets them: packed back to back
// (GetRanges: the reply lands in them directly), in up to three runs with
// gaps (direct, one iovec per run), in more runs or out of request order
// (through the bounce buffer), and a round too small to hold an error text.
// Every record is checked against the pattern, and every byte outside the
// destinations must stay untouched.
func TestGatherDirect(t *testing.T) {
	o, f := openGather(t, 10*time.Second)
	r, tgs, peers := readerWith(t, f, o, 8<<20, false, 1)
	tg, p := tgs[0], peers[0]
	rng := rand.New(rand.NewSource(11))
	layouts := []struct {
		name string
		n    int
		gap  func(i int) int // bytes left free before record i
		rev  bool            // records placed in reverse request order
	}{
		{"packed", 128, func(int) int { return 0 }, false},
		{"three runs", 64, func(i int) int { return map[bool]int{true: 24}[i == 20 || i == 41] }, false},
		{"four runs", 64, func(i int) int { return map[bool]int{true: 8}[i%16 == 0 && i > 0] }, false},
		{"every record apart", 32, func(int) int { return 8 }, false},
		{"reverse order", 32, func(int) int { return 0 }, true},
		{"tiny", 3, func(int) int { return 0 }, false},
	}
	for _, l := range layouts {
		lens := make([]int, l.n)
		at := make([]int, l.n)
		end := 0
		for k := 0; k < l.n; k++ {
			i := k
			if l.rev {
				i = l.n - 1 - k
			}
			lens[i] = (1<<10 + rng.Intn(15<<10)) &^ 7
			if l.name == "tiny" {
				lens[i] = 64
			}
			end += l.gap(i)
			at[i] = end
			end += lens[i]
		}
		buf := make([]byte, end+64)
		for i := range buf {
			buf[i] = 0xA5
		}
		ops := make([]ReadOp, l.n)
		for i := range ops {
			off := uint64(rng.Intn(tg.size-lens[i])) &^ 7
			ops[i] = ReadOp{Dst: buf[at[i] : at[i]+lens[i]], Peer: p, Addr: tg.base + off, Key: tg.key}
		}
		before := r.GatheredOps()
		if _, err := r.ReadGather(ops); err != nil {
			t.Fatalf("%s: %v", l.name, err)
		}
		if got := r.GatheredOps() - before; got != uint64(l.n) {
			t.Fatalf("%s: %d ops gathered, want %d", l.name, got, l.n)
		}
		checkOps(t, l.name, ops, tgs, peers)
		mine := make([]bool, len(buf))
		for i := range ops {
			for j := at[i]; j < at[i]+lens[i]; j++ {
				mine[j] = true
			}
		}
		for j, b := range buf {
			if !mine[j] && b != 0xA5 {
				t.Fatalf("%s: byte %d outside every destination was written (%#x)", l.name, j, b)
			}
		}
	}
}

// Gather replies never go by rxm's rendezvous (whose teardown in libfabric
// 1.17 can answer a queued request on a freed endpoint): once the library
// is loaded, rxm's eager limit is above the largest reply, header and
// error text included, unless the environment set one.
func TestRxmEagerLimit(t *testing.T) {
	if err := loadLibrary(); err != nil {
		t.Skip(err)
	}
	have, ours := rxmEagerLimit()
	if ours < maxGatherBytes+gatherRepHdr+gatherText {
		t.Fatalf("DD_RXM_EAGER_LIMIT %d is below the largest reply (%d bytes of rows)", ours, maxGatherBytes)
	}
	want := strconv.FormatUint(ours, 10)
	if v, ok := os.LookupEnv("FI_OFI_RXM_EAGER_LIMIT"); ok {
		want = v // the user's value wins
	}
	if have != want {
		t.Fatalf("FI_OFI_RXM_EAGER_LIMIT is %q in libfabric's environment, want %q", have, want)
	}
}

// A batch that would fill fewer rounds than may be in flight is split
// over them, in rounds of at least 256 KiB and at most the cap.
func TestGatherRoundCap(t *testing.T) {
	const k = 1 << 10
	for _, c := range []struct {
		total, cap uint64
		rounds     int
		want       uint64
	}{
		{1100 * k, 2048 * k, 4, 275 * k},   // one peer's 1.1 MB: 4 rounds
		{100 * k, 2048 * k, 4, 256 * k},    // small: one round, as before
		{600 * k, 2048 * k, 4, 256 * k},    // not below 256 KiB
		{16384 * k, 2048 * k, 4, 2048 * k}, // enough to fill every round at the cap
		{1100 * k, 2048 * k, 1, 2048 * k},  // one round in flight: nothing to overlap
		{1100 * k, 100 * k, 4, 100 * k},    // never above the cap
		{0, 2048 * k, 4, 256 * k},
	} {
		if got := gatherRoundCap(c.total, c.cap, c.rounds); got != c.want {
			t.Errorf("gatherRoundCap(%d, %d, %d) = %d, want %d", c.total, c.cap, c.rounds, got, c.want)
		}
	}
}
