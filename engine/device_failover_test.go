package engine

// Device reads fail over like host reads: they ask the same placement.

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"syscall"
	"testing"
	"time"
)

func init() { scenarios["gpufailover"] = scenarioGPUFailover }

// scenarioGPUFailover: 4 ranks in 2 replica groups (WIDTH 2) on the
// stand-in GPU drivers. Rank 0 loops device reads (GetBatchDevice of
// random rows through the Store and a Reader, GetDevice of a range across
// the shard boundary) and checks every row read back from device memory.
// After the first rounds rank 1, the owner of shard 1, is killed; the loop
// goes on until its death is known and reads have moved to rank 3, and
// every call of the loop must succeed with every row right. Rows that
// came from the wrong group would fail the check: each group's rows are
// salted alike, so only a true replica passes.
func scenarioGPUFailover(w *worker) error {
	if v := w.intParam("MAXPIECE", 0); v > 0 {
		maxPieceBytes = int64(v)
	}
	spec := varSpec{name: "devrep", dt: Uint8, rowBytes: 3000, base: 60, emptyMember: -1}
	salt := spec.salt(0)
	s, err := w.openSalted(spec, true)
	if err != nil {
		return err
	}
	info, err := s.Query(spec.name)
	if err != nil {
		return err
	}
	dir := w.param("TELDIR", os.TempDir())
	if err := s.Barrier(); err != nil {
		return err
	}
	if s.Rank() != 0 {
		if s.Rank() == 1 { // the owner of shard 1 dies once rank 0 is reading
			if err := filesMeet(dir, "reading", 1, []int{0}, 60*time.Second); err != nil {
				return err
			}
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Minute)
		}
		if err := filesMeet(dir, "done", s.Rank(), []int{0, 2, 3}, 120*time.Second); err != nil {
			return err
		}
		closeWithDead(w, s)
		return nil
	}

	r, err := s.NewReader()
	if err != nil {
		return err
	}
	defer r.Close()
	rb := spec.rowBytes
	n := info.GlobalRows
	d, err := newDevBuf(s, 7, int(n*rb))
	if err != nil {
		return err
	}
	defer d.close()
	rng := rand.New(rand.NewSource(26))
	shard1 := info.Shards[1]
	round := func(k int) error {
		for _, g := range []struct {
			what string
			get  deviceGetter
		}{{"store", s}, {"reader", r}} {
			// Random rows, half of them in shard 1, some consecutive runs.
			idx := make([]int64, 50)
			for i := range idx {
				switch {
				case i > 0 && i%5 != 0:
					idx[i] = (idx[i-1] + 1) % n
				case i%2 == 0:
					idx[i] = shard1 + rng.Int63n(n-shard1)
				default:
					idx[i] = rng.Int63n(n)
				}
			}
			if err := d.checkBatch(g.get, spec, salt, idx); err != nil {
				return fmt.Errorf("round %d: %s %w", k, g.what, err)
			}
			start := max(shard1-5, 0)
			if err := d.checkRange(g.get, spec, salt, start, n-start); err != nil {
				return fmt.Errorf("round %d: %s: %w", k, g.what, err)
			}
		}
		return nil
	}
	for k := 0; k < 3; k++ {
		if err := round(k); err != nil {
			return err
		}
	}
	if err := os.WriteFile(dir+"/reading.0", nil, 0o600); err != nil {
		return err
	}
	// Go on reading through the kill until rank 1 is known dead and reads
	// have failed over, then some more rounds.
	k, after := 3, 0
	for t0 := time.Now(); after < 5; k++ {
		if err := round(k); err != nil {
			return err
		}
		if s.PeerDead(1) && s.Failovers().From[1] > 0 {
			after++
		}
		if time.Since(t0) > 60*time.Second {
			return errors.New("rank 1's death did not move device reads to rank 3 within 60s")
		}
	}
	f := s.Failovers()
	if f.To[3] == 0 || f.To[3] != f.From[1] {
		return fmt.Errorf("failovers %+v: want reads moved from rank 1 to rank 3 only", f)
	}
	w.logf("%d rounds; %d row reads of rank 1 served by rank 3", k, f.From[1])
	r.Close()
	if err := filesMeet(dir, "done", 0, []int{0, 2, 3}, 120*time.Second); err != nil {
		return err
	}
	closeWithDead(w, s)
	return nil
}

// closeWithDead closes a store one of whose ranks is dead: the collective
// part fails naming it; what matters is that it returns.
func closeWithDead(w *worker, s *Store) {
	t0 := time.Now()
	err := s.Close()
	w.logf("Close with rank 1 dead took %v: %v", time.Since(t0).Round(time.Millisecond), err)
}

// TestDeviceFailover: device reads fail over to a replica when the owner
// dies mid-loop, on the mapped path (CUDA) and over the fabric (HIP, with
// reads split below a row).
func TestDeviceFailover(t *testing.T) {
	if realGPU() {
		t.Skip("the stand-in drivers' scenario")
	}
	cases := []struct{ mode, runtime, piece string }{{"local", "cuda", ""}, {"tcp", "hip", "1000"}}
	for _, c := range cases {
		t.Run("path="+c.mode+"/gpu="+c.runtime, func(t *testing.T) {
			params := gpuParams(t, c.runtime, map[string]string{"MODE": c.mode, "WIDTH": "2", "MAXPIECE": c.piece,
				"FTIMEOUT": "3s", "TIMEOUT": "10s", "STAGE": "16384"})
			res := spawnRanks(t, 4, "gpufailover", params, 120*time.Second,
				func(r rankResult) bool { return r.rank == 1 && killedBySignal(r.err, syscall.SIGKILL) })
			if !killedBySignal(res[1].err, syscall.SIGKILL) {
				t.Errorf("rank 1 was not killed: %v\n%s", res[1].err, res[1].output)
			}
		})
	}
}
