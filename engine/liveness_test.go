package engine

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/internal/testkit"
)

func init() {
	scenarios["silent"] = scenarioSilent
	scenarios["markdead"] = scenarioMarkDead
	scenarios["frozenread"] = scenarioFrozenRead
}

// deadReadAtOnce bounds a read of a rank known dead, which must fail "at
// once": 2 s holds on a loaded 2-core machine, stretched under -race, and
// stays under the fabric deadline (FTIMEOUT 5 s, stretched alike) that a
// read sent to the frozen rank would wait for.
const deadReadAtOnce = 2 * time.Second * testkit.RaceScale

// scenarioSilent: the last rank freezes (SIGSTOP: its process and its
// connections stay, it only stops answering, as behind a cut link). Every
// survivor's next collective fails within the liveness deadline + 1 s
// naming it; reads of its rows then fail at once, naming it, while the
// other ranks' rows keep working.
func scenarioSilent(w *worker) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	spec := varSpec{name: "silent", dt: Bytes, rowBytes: 256, base: 40, emptyMember: -1}
	if err := addPattern(s, spec); err != nil {
		return err
	}
	victim := s.World() - 1
	if s.Rank() == victim {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		time.Sleep(time.Minute)
		return errors.New("the frozen rank woke up")
	}
	liveness := s.opts.Liveness
	t0 := time.Now()
	err = s.Barrier()
	took := time.Since(t0)
	if !errors.Is(err, ErrPeerDead) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", victim)) {
		return fmt.Errorf("barrier with a frozen rank: got %v, want ErrPeerDead naming rank %d", err, victim)
	}
	w.logf("barrier failed after %v (liveness %v): %v", took.Round(time.Millisecond), liveness, err)
	// +1 s allowed, +1 s for a loaded machine, both stretched under -race;
	// still well under the 20 s Timeout that a missed death would take.
	if limit := liveness + 2*time.Second*testkit.RaceScale; took > limit {
		return fmt.Errorf("barrier failed after %v, liveness %v: want within %v", took, liveness, limit)
	}
	if s.Alive(victim) || fmt.Sprint(s.DeadRanks()) != fmt.Sprint([]int{victim}) {
		return fmt.Errorf("Alive(%d)=%v DeadRanks=%v", victim, s.Alive(victim), s.DeadRanks())
	}
	info, _ := s.Query(spec.name)
	vRows := seqIdx(info.Shards[victim], 4) // Shards[r]: first global row of rank r
	dst := make([]byte, 4*spec.rowBytes)
	for i := range 3 {
		t1 := time.Now()
		err := s.GetBatch(spec.name, vRows, dst)
		if !errors.Is(err, ErrPeerDead) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", victim)) {
			return fmt.Errorf("read %d of the frozen rank's rows: got %v, want ErrPeerDead naming it", i, err)
		}
		if d := time.Since(t1); d > deadReadAtOnce {
			return fmt.Errorf("read %d of a dead rank took %v, want at once (within %v)", i, d, deadReadAtOnce)
		}
		if i == 0 {
			w.logf("read: %v", err)
		}
	}
	live := seqIdx(0, 4)
	if err := s.GetBatch(spec.name, live, dst); err != nil {
		return fmt.Errorf("rows of rank 0: %w", err)
	}
	if err := checkRows(dst, spec.rowBytes, spec.salt(0), live); err != nil {
		return err
	}
	if err := fileBarrier(w.param("TELDIR", os.TempDir()), "survivors", w.rank, victim, 30*time.Second); err != nil {
		return err
	}
	if s.Rank() == 0 {
		syscall.Kill(s.peers[victim].Pid, syscall.SIGKILL)
	}
	s.Close() // its barrier fails (dead member): it must return
	return nil
}

// scenarioMarkDead: rank 0 marks rank 1 dead through the API (as a replica
// helper does after a failover): its reads of rank 1's rows fail at once
// naming rank 1 and the cause, its collectives name rank 1 too.
func scenarioMarkDead(w *worker) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	spec := varSpec{name: "md", dt: Bytes, rowBytes: 64, base: 10, emptyMember: -1}
	if err := addPattern(s, spec); err != nil {
		return err
	}
	info, _ := s.Query(spec.name)
	rows1 := seqIdx(info.Shards[1], 2)
	dst := make([]byte, 2*spec.rowBytes)
	if err := s.GetBatch(spec.name, rows1, dst); err != nil {
		return err
	}
	if err := checkRows(dst, spec.rowBytes, spec.salt(0), rows1); err != nil {
		return err
	}
	// Nobody reads rank 1 any more once rank 0 marks it.
	if err := fileBarrier(w.param("TELDIR", os.TempDir()), "read", w.rank, s.World(), 30*time.Second); err != nil {
		return err
	}
	if s.Rank() == 0 {
		if !s.Alive(1) {
			return errors.New("rank 1 not alive before MarkDead")
		}
		s.MarkDead(1, errors.New("replica helper gave up"))
		if s.Alive(1) || !s.Alive(0) {
			return fmt.Errorf("after MarkDead(1): Alive(1)=%v Alive(0)=%v", s.Alive(1), s.Alive(0))
		}
		err := s.GetBatch(spec.name, rows1, dst)
		if !errors.Is(err, ErrPeerDead) || !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "replica helper gave up") {
			return fmt.Errorf("read after MarkDead: %v", err)
		}
		if err := s.Barrier(); !errors.Is(err, ErrPeerDead) || !strings.Contains(err.Error(), "rank 1") {
			return fmt.Errorf("barrier after MarkDead: %v", err)
		}
	}
	if err := fileBarrier(w.param("TELDIR", os.TempDir()), "marked", w.rank, s.World(), 30*time.Second); err != nil {
		return err
	}
	s.Close() // rank 0's collectives are broken; the others' close barrier times out
	return nil
}

// scenarioFrozenRead: the last rank freezes (SIGSTOP) while rank 0 reads
// its rows over the fabric (tcp). The read is in flight, waiting on a
// target that never answers; the control plane finds the rank dead within
// the liveness deadline, and the read must then fail at once (the fabric
// cuts it short: Health.OnDead, Fabric.PeerDead) with ErrPeerDead naming
// the rank, not at the fabric deadline (FTIMEOUT, 30 s here).
func scenarioFrozenRead(w *worker) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	spec := varSpec{name: "frozen", dt: Bytes, rowBytes: 4096, base: 70, emptyMember: -1}
	if err := addPattern(s, spec); err != nil {
		return err
	}
	victim := s.World() - 1
	info, _ := s.Query(spec.name)
	rows := seqIdx(info.Shards[victim], 64)
	dst := make([]byte, int64(len(rows))*spec.rowBytes)
	if s.Rank() == 0 { // connect to the victim while it answers
		if err := s.GetBatch(spec.name, rows, dst); err != nil {
			return err
		}
		if err := checkRows(dst, spec.rowBytes, spec.salt(0), rows); err != nil {
			return err
		}
	}
	if err := fileBarrier(w.param("TELDIR", os.TempDir()), "ready", w.rank, s.World(), 30*time.Second); err != nil {
		return err
	}
	switch s.Rank() {
	case victim:
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		time.Sleep(time.Minute)
		return errors.New("the frozen rank woke up")
	case 0:
		for !stopped(s.peers[victim].Pid) {
			time.Sleep(time.Millisecond)
		}
		t0 := time.Now()
		err := s.GetBatch(spec.name, rows, dst)
		took := time.Since(t0)
		if !errors.Is(err, ErrPeerDead) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d", victim)) {
			return fmt.Errorf("read of a rank that froze: got %v after %v, want ErrPeerDead naming rank %d", err, took, victim)
		}
		w.logf("read failed after %v (liveness %v, fabric deadline %v): %v", took.Round(time.Millisecond), s.opts.Liveness, s.opts.Fabric.Timeout, err)
		if took > s.opts.Liveness+5*time.Second {
			return fmt.Errorf("the read failed after %v: not cut short at the death (liveness %v)", took, s.opts.Liveness)
		}
		syscall.Kill(s.peers[victim].Pid, syscall.SIGKILL)
	}
	s.Close() // its barrier fails (dead member): it must return
	return nil
}

// stopped reports whether process pid is stopped (state T in /proc).
func stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && i+2 < len(b) && b[i+2] == 'T'
}

// TestLivenessFrozenRead: see scenarioFrozenRead.
func TestLivenessFrozenRead(t *testing.T) {
	spawnRanks(t, 3, "frozenread", map[string]string{"MODE": "tcp", "LIVENESS": "1s", "TIMEOUT": "20s", "FTIMEOUT": "30s"},
		90*time.Second, killedVictim(2)) // rank 0 kills it once the read has failed
}

func TestLivenessFrozenRank(t *testing.T) {
	for _, mode := range []string{"local", "tcp"} {
		t.Run(mode, func(t *testing.T) {
			spawnRanks(t, 3, "silent", map[string]string{"MODE": mode, "LIVENESS": "1s", "TIMEOUT": "20s", "FTIMEOUT": "5s"},
				60*time.Second, killedVictim(2)) // rank 0 kills it once the survivors are done
		})
	}
}

func TestLivenessMarkDead(t *testing.T) {
	spawnRanks(t, 3, "markdead", map[string]string{"MODE": "tcp", "TIMEOUT": "2s"}, 60*time.Second, nil)
}
