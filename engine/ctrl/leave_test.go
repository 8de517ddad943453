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
// others' results are still going down when its exit is seen. Then a
// whole node, its agent too, exits so: the other agents see its
// connections end while they may still hand their ranks the result.
func TestExitAfterLastCollective(t *testing.T) {
	for _, c := range []struct {
		world, ppn int
		node       bool // node 0 exits, not the first plain rank of each node
	}{{8, 8, false}, {16, 8, false}, {16, 4, true}} {
		t.Run(fmt.Sprintf("world=%d,ppn=%d,node=%v", c.world, c.ppn, c.node), func(t *testing.T) {
			exits := map[int]bool{}
			for r := 1; r < c.world && !c.node; r += c.ppn {
				exits[r] = true
			}
			for r := 0; r < c.ppn && c.node; r++ {
				exits[r] = true
			}
			for round := range 8 {
				testExitAfterLast(t, c.world, c.ppn, exits, round)
			}
		})
	}
}

func testExitAfterLast(t *testing.T, world, ppn int, exits map[int]bool, round int) {
	cl, errs := startCluster(t, world, ppn, fast, nil)
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	defer cl.close()
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
	killAfterItsPart(cl, agent, victim)
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

// TestMarkedDeathToldNotMismatch: the ordering of make test-netns-tree's
// step 2 (host 1 cut). Rank 1 (plain, node 0) finds rank 2 (node 1) dead
// by itself (a failed read: the store marks it dead) and, closing, calls
// the store's close barrier, while its agent, rank 0, is still in the
// trainer's all-gather, waiting for rank 1's part. Rank 0 must fail
// naming the dead rank, told by rank 1, not blame rank 1 ("collective
// mismatch": rank 1's part belongs to another collective), and rank 1's
// barrier fails at once naming rank 2 too.
func TestMarkedDeathToldNotMismatch(t *testing.T) {
	cl, errs := startCluster(t, 4, 2, fast, nil)
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	// Node 1 (ranks 2, 3) is cut: it takes part in nothing more.
	res := make(chan error, 1)
	go func() {
		_, err := cl.rank(0).AllGather("loss", blobOf(0), 0)
		res <- err
	}()
	time.Sleep(100 * time.Millisecond) // rank 0 waits for rank 1's part
	r1 := cl.rank(1)
	r1.MarkDead(2, errors.New("read from rank 2: connection timed out"))
	t0 := time.Now()
	err1 := r1.Barrier("close", 0)
	if !errors.Is(err1, fault.ErrPeerDead) || fault.RankOf(err1) != 2 {
		t.Fatalf("rank 1's barrier: %v, want ErrPeerDead naming rank 2", err1)
	}
	r1.Close()
	var err0 error
	select {
	case err0 = <-res:
	case <-time.After(10 * time.Second):
		t.Fatal("rank 0 still waits 10 s after rank 1 failed (deadline 20 s)")
	}
	if !errors.Is(err0, fault.ErrPeerDead) || fault.RankOf(err0) != 2 {
		t.Fatalf("rank 0: %v, want ErrPeerDead naming rank 2", err0)
	}
	t.Logf("rank 0 failed %v after rank 1's barrier: %v", time.Since(t0).Round(time.Millisecond), err0)
}

// TestGaveUpOnDeadAfterItsPart: the ordering of make test-slurm's kill
// under tree. Rank 3 sent its part of an all-gather and was killed; the
// others learn its death, which lets that all-gather go on (its part is
// in). Rank 2 meanwhile gave up on rank 3 (a read from it failed) and,
// closing, calls the store's close barrier instead of the all-gather:
// that barrier must fail at once naming rank 3, and ranks 0 and 1, in the
// all-gather, must fail naming rank 3 as well, not blame rank 2 for
// calling another collective.
func TestGaveUpOnDeadAfterItsPart(t *testing.T) {
	const victim = 3
	cl, errs := startCluster(t, 4, 4, fast, nil)
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	killAfterItsPart(cl, cl.rank(0), victim)
	r2 := cl.rank(2)
	for deadline := time.Now().Add(10 * time.Second); !r2.Dead(victim); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rank 2 never learnt that rank 3 died")
		}
	}
	res := make(chan error, 2)
	for _, r := range []int{0, 1} {
		go func() {
			_, err := cl.rank(r).AllGather("x", blobOf(r), 0)
			res <- err
		}()
	}
	r2.MarkDead(victim, errors.New("read from rank 3: connection refused"))
	if err := r2.Barrier("close", 0); !errors.Is(err, fault.ErrPeerDead) || fault.RankOf(err) != victim {
		t.Fatalf("rank 2's close barrier: %v, want ErrPeerDead naming rank %d", err, victim)
	}
	for range 2 {
		select {
		case err := <-res:
			if !errors.Is(err, fault.ErrPeerDead) || fault.RankOf(err) != victim {
				t.Fatalf("the all-gather: %v, want ErrPeerDead naming rank %d", err, victim)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a rank still waits in the all-gather 10 s after rank 2 gave up (deadline 20 s)")
		}
	}
}

// TestOneGracePerCollective: an agent handing an all-gather's result to
// its local ranks after six of them sent their parts and were killed
// waits ExitGrace once, not once per dead rank (make test-slurm under
// tree: the ranks that failed on a killed rank had exited too, and the
// agent failed 11 × 500 ms after the kill).
func TestOneGracePerCollective(t *testing.T) {
	defer func(g time.Duration) { ExitGrace = g }(ExitGrace)
	ExitGrace = time.Second
	cl, errs := startCluster(t, 8, 8, fast, nil)
	if err := firstErr(errs); err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	agent := cl.rank(0)
	for r := 1; r <= 6; r++ {
		killAfterItsPart(cl, agent, r)
	}
	go cl.rank(7).AllGather("x", blobOf(7), 0)
	t0 := time.Now()
	_, err := agent.AllGather("x", blobOf(0), 0)
	took := time.Since(t0)
	if !errors.Is(err, fault.ErrPeerDead) || fault.RankOf(err) < 1 || fault.RankOf(err) > 6 {
		t.Fatalf("the agent's all-gather: %v, want ErrPeerDead naming one of ranks 1-6", err)
	}
	if took > 4*ExitGrace {
		t.Fatalf("the agent failed %v after its all-gather began: more than one ExitGrace (%v) per collective", took, ExitGrace)
	}
	t.Logf("the agent failed after %v: %v", took, err)
}

// killAfterItsPart starts rank r's all-gather "x" (the first collective)
// and kills r once its agent has its part.
func killAfterItsPart(cl *cluster, agent *Ctrl, r int) {
	agent.mu.Lock()
	up := agent.locals[r]
	agent.mu.Unlock()
	go cl.rank(r).AllGather("x", blobOf(r), 0)
	for up.upSeq.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	cl.rank(r).kill()
}
