package ctrl

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// TestExitAfterLastCollective: plain ranks that get the result of the
// job's last all-gather and then end as a process that never closes does
// (kill: their sockets close, no goodbye) are no failure of the ranks still
// finishing that all-gather: every other rank gets every part, checked. As
// under engine/mesh, the exit is still a death for what comes after: the
// next collective fails on every other rank with ErrPeerDead naming an
// exited rank. (Before the fix an agent's news of the exit could reach a
// local rank before its result, which then failed: 'rank 1 dead'.) The
// first plain rank of each node exits: its result goes down first, so the
// others' results are still going down when its exit is seen.
func TestExitAfterLastCollective(t *testing.T) {
	for _, c := range []struct{ world, ppn int }{{8, 8}, {16, 8}} {
		t.Run(fmt.Sprintf("world=%d,ppn=%d", c.world, c.ppn), func(t *testing.T) {
			for round := range 8 {
				testExitAfterLast(t, c.world, c.ppn, round)
			}
		})
	}
}

func testExitAfterLast(t *testing.T, world, ppn, round int) {
	cl, errs := startCluster(t, world, ppn, fast, nil)
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	exits := map[int]bool{}
	for r := 1; r < world; r += ppn {
		exits[r] = true
	}
	res := cl.each(func(k *Ctrl) error {
		for i := range 3 {
			blobs, err := k.AllGather(fmt.Sprint("loss", i), blobOf(k.Rank()+i), 0)
			if err != nil {
				return fmt.Errorf("all-gather %d: %w", i, err)
			}
			for r, b := range blobs {
				if !bytes.Equal(b, blobOf(r+i)) {
					return fmt.Errorf("all-gather %d: rank %d's part %x, want %x", i, r, b, blobOf(r+i))
				}
			}
		}
		if exits[k.Rank()] {
			k.kill() // os.Exit after the last collective
		}
		return nil
	})
	if err := firstErr(res); err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	res = cl.each(func(k *Ctrl) error { return k.Barrier("after", 0) })
	for r, err := range res {
		if exits[r] {
			continue
		}
		if !errors.Is(err, fault.ErrPeerDead) || !exits[fault.RankOf(err)] {
			t.Fatalf("round %d: rank %d's barrier after the exits: %v, want ErrPeerDead naming one of %v", round, r, err, exits)
		}
	}
}

// TestExitAfterPartBeforeResult: a plain rank that sent its part of an
// all-gather up and exits before its result came down has left in the
// middle of a collective: its agent, which cannot hand it the result,
// fails at once with ErrPeerDead naming it; every other rank either fails
// that all-gather so, or (having got every part) the next collective.
func TestExitAfterPartBeforeResult(t *testing.T) {
	const victim = 5
	cl, errs := startCluster(t, 8, 4, fast, nil)
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	agent := cl.rank(4)
	agent.mu.Lock()
	up := agent.locals[victim]
	agent.mu.Unlock()
	v := cl.rank(victim)
	go v.AllGather("x", blobOf(victim), 0)
	for up.upSeq.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	v.kill()
	t0 := time.Now()
	res := cl.each(func(k *Ctrl) error {
		_, err := k.AllGather("x", blobOf(k.Rank()), 0)
		if err == nil && k == agent {
			return fmt.Errorf("the all-gather succeeded on the victim's agent")
		}
		if err == nil {
			err = k.Barrier("next", 0)
		}
		return err
	})
	took := time.Since(t0)
	wantDeadNamed(t, res, victim)
	if took > 5*time.Second {
		t.Fatalf("the all-gather failed after %v (deadline 20 s)", took)
	}
	t.Logf("all failed after %v: %v", took, res[0])
}

func TestDeathApplies(t *testing.T) {
	for _, c := range []struct {
		done, seq uint64
		want      bool
	}{
		{0, 0, true},  // bootstrap: every death
		{5, 0, true},  // idem
		{0, 1, true},  // dead before any collective
		{4, 5, true},  // its part of 5 missing
		{5, 5, false}, // its part of 5 in: 5 goes on
		{6, 5, false},
	} {
		if got := DeathApplies(c.done, c.seq); got != c.want {
			t.Errorf("DeathApplies(done %d, seq %d) = %v, want %v", c.done, c.seq, got, c.want)
		}
	}
}
