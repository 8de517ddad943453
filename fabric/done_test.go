package fabric

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/internal/testkit"
)

// A batch over two targets, one of them stopped (SIGSTOP), fails at the
// deadline that SetTimeout gave it, not at Options.Timeout; afterwards
// ReadOp.Done tells which ops landed: every op marked done holds its row
// (checked against the pattern) and no op of the stopped target is marked
// done. On the first call (both connections up) ops of the healthy target
// complete; later calls run on a fresh endpoint whose connection to the
// stopped target cannot complete, and ops are posted in order, so fewer
// land. This is what lets the engine re-read only the missing rows from a
// replica.
func TestDoneAfterStoppedPeer(t *testing.T) {
	o := provCases[0].opts // tcp: a stopped shm peer can hang the reader inside the provider
	o.Timeout = 20 * time.Second
	f := openOrSkip(t, o)
	r, tgs, peers := readerWith(t, f, o, 4<<20, false, 1, 2)
	const row, n = 4096, 600
	dst := make([]byte, n*row)
	mkOps := func() []ReadOp {
		ops := make([]ReadOp, n)
		for i := range ops {
			k := i % 2
			off := uint64((i*7)%(tgs[k].size/row)) * row
			ops[i] = ReadOp{Dst: dst[i*row : (i+1)*row], Peer: peers[k], Addr: tgs[k].base + off, Key: tgs[k].key, Done: true}
		}
		return ops
	}
	if _, err := r.ReadBatch(mkOps()[:8]); err != nil {
		t.Fatal(err)
	}
	if err := tgs[1].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer tgs[1].cmd.Process.Signal(syscall.SIGCONT)
	r.SetTimeout(700 * time.Millisecond * testkit.RaceScale)
	first := true
	for _, m := range []struct {
		name string
		read func([]ReadOp) (Timing, error)
	}{{"ReadGather", r.ReadGather}, {"ReadBatch", r.ReadBatch}, {"ReadGather", r.ReadGather}, {"ReadBatch", r.ReadBatch}} {
		clear(dst)
		ops := mkOps()
		start := time.Now()
		_, err := m.read(ops)
		el := time.Since(start)
		if !errors.Is(err, fault.ErrTimeout) || fault.RankOf(err) != 2 || !fault.IsRemote(err) {
			t.Fatalf("%s: want a timeout naming peer 2, got %v", m.name, err)
		}
		if el > 10*time.Second*testkit.RaceScale {
			t.Fatalf("%s: returned after %v: SetTimeout(%v) was not used", m.name, el, 700*time.Millisecond*testkit.RaceScale)
		}
		healthy := 0
		for i, op := range ops {
			k := i % 2
			switch {
			case op.Done && k == 1:
				t.Fatalf("%s: op %d of the stopped target marked done", m.name, i)
			case op.Done:
				if err := tgs[0].check(op.Dst, op.Addr); err != nil {
					t.Fatalf("%s: op %d marked done: %v", m.name, i, err)
				}
				healthy++
			}
		}
		if healthy == 0 && first {
			t.Fatalf("%s: no op of the healthy target marked done", m.name)
		}
		t.Logf("%s: %d of %d ops done before the deadline (%v): %v", m.name, healthy, n, el, err)
		first = false
	}
	// SetTimeout(0) restores Options.Timeout; the resumed target serves.
	r.SetTimeout(0)
	tgs[1].cmd.Process.Signal(syscall.SIGCONT)
	ops := mkOps()
	readChecked(t, "after resume", r.ReadBatch, ops, tgs, peers)
}
