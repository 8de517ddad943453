package engine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/telemetry"
)

func init() { scenarios["replicas"] = scenarioReplicas }

// openSalted opens the rank's store and adds spec with the rows of its
// replica group salted with spec.salt(0) (addSalted); with replicated the
// store must be 4 ranks in 2 replica groups. On an error the store is
// closed.
func (w *worker) openSalted(spec varSpec, replicated bool) (*Store, error) {
	s, err := w.open()
	if err != nil {
		return nil, err
	}
	if replicated && (s.World() != 4 || s.Width() != 2) {
		err = fmt.Errorf("want 4 ranks of width 2, got %d/%d", s.World(), s.Width())
	} else {
		err = addSalted(s, spec, spec.salt(0))
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// addSalted adds spec with this rank's rows of the pattern salted salt
// (the same salt in every group: the groups are true replicas).
func addSalted(s *Store, spec varSpec, salt uint64) error {
	member := s.Rank() % s.Width()
	var start int64
	for i := 0; i < member; i++ {
		start += spec.nLocal(i)
	}
	n := spec.nLocal(member)
	local := make([]byte, n*spec.rowBytes)
	for i := int64(0); i < n; i++ {
		fillRow(local[i*spec.rowBytes:(i+1)*spec.rowBytes], salt, start+i)
	}
	return s.Add(spec.name, spec.dt, spec.rowElems(), local)
}

// filesMeet is a barrier through files among the given ranks (the store's
// own collectives cannot run once a rank is dead).
func filesMeet(dir, tag string, rank int, ranks []int, timeout time.Duration) error {
	if err := os.WriteFile(fmt.Sprintf("%s/%s.%d", dir, tag, rank), nil, 0o600); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for _, r := range ranks {
		for {
			if _, err := os.Stat(fmt.Sprintf("%s/%s.%d", dir, tag, r)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("file barrier %s: rank %d missing", tag, r)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// scenarioReplicas: 4 ranks in 2 replica groups (WIDTH 2).
//  1. UpdateReplicas rewrites rows of every shard on all replicas; every
//     rank reads every row and checks it (new rows and old ones).
//  2. Replicas given different rows: every rank fails with ErrMismatch
//     naming the disagreeing ranks, and nothing changes.
//  3. Rank 1 dies (SIGKILL): rank 0 reads every row, its group's member 1
//     rows from rank 3 (the replica), through the store and a Reader;
//     every row checked; the failovers are counted against rank 1.
//  4. Rank 3 dies too: rows of shard 1 have no rank left, and the error
//     names both ranks tried (1 and 3).
func scenarioReplicas(w *worker) error {
	spec := varSpec{name: "rep", dt: Bytes, rowBytes: 3072, base: 30, emptyMember: -1}
	salt, salt2 := spec.salt(0), spec.salt(77)
	s, err := w.openSalted(spec, true)
	if err != nil {
		return err
	}
	info, _ := s.Query(spec.name)
	all := seqIdx(0, info.GlobalRows)
	const upd = 5 // rows 0..4 of every shard get salt2
	saltOf := func(g int64) uint64 {
		o := 0
		for o+1 < len(info.Shards)-1 && info.Shards[o+1] <= g {
			o++
		}
		if g-info.Shards[o] < upd {
			return salt2
		}
		return salt
	}
	dst := make([]byte, int64(len(all))*spec.rowBytes)
	check := func(what string, g getter, idx []int64) error {
		poison(dst)
		if err := g.GetBatch(spec.name, idx, dst); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		for i, gi := range idx {
			if err := checkRows(dst[int64(i)*spec.rowBytes:int64(i+1)*spec.rowBytes], spec.rowBytes, saltOf(gi), []int64{gi}); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
		return nil
	}
	rows := func(sl uint64) []byte {
		b := make([]byte, upd*spec.rowBytes)
		for i := int64(0); i < upd; i++ {
			fillRow(b[i*spec.rowBytes:(i+1)*spec.rowBytes], sl, info.LocalStart+i)
		}
		return b
	}

	// 1. A consistent update of every replica.
	if err := s.UpdateReplicas(spec.name, rows(salt2), 0); err != nil {
		return err
	}
	if err := check("after UpdateReplicas", s, all); err != nil {
		return err
	}
	// 2. Replicas that disagree: rank 3 (shard 1 of group 1) differs from rank 1.
	mine := rows(salt2)
	if s.Rank() == 3 {
		mine = rows(spec.salt(99))
	}
	err = s.UpdateReplicas(spec.name, mine, 0)
	if !errors.Is(err, ErrMismatch) || !slices.Equal(fault.RanksOf(err), []int{1, 3}) {
		return fmt.Errorf("UpdateReplicas with disagreeing replicas: got %v, want ErrMismatch naming ranks 1 and 3", err)
	}
	if err := check("after a refused UpdateReplicas", s, all); err != nil {
		return err
	}
	if err := s.Barrier(); err != nil {
		return err
	}

	// 3. Rank 1 dies; rank 0 reads its rows from rank 3.
	dir := w.param("TELDIR", os.TempDir())
	if s.Rank() == 1 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	}
	r, err := s.NewReader()
	if err != nil {
		return err
	}
	// A mapped shard stays readable after its owner died; wait until the
	// death is known, so that the reads below must fail over.
	for t0 := time.Now(); !s.PeerDead(1); time.Sleep(5 * time.Millisecond) {
		if time.Since(t0) > 20*time.Second {
			return errors.New("rank 1's death not seen within 20s")
		}
	}
	for k, g := range []getter{s, r, s} {
		if err := check(fmt.Sprintf("read %d with rank 1 dead", k), g, all); err != nil {
			return err
		}
	}
	if s.Rank() == 0 {
		f := s.Failovers()
		if f.From[1] == 0 || f.To[3] == 0 || !slices.Contains(f.Dead, 1) {
			return fmt.Errorf("rank 1 dead: failovers %+v, want reads moved from rank 1 to rank 3", f)
		}
		v, _ := s.Var(spec.name)
		w.logf("rank 1 dead: %d row reads of %q served by rank 3", v.Failovers(), spec.name)
		// Telemetry: the variable's stripes count the failovers, and the
		// peer table names rank 1 as the failed owner and rank 3 as the
		// replica that served (what ddtop shows).
		seg, err := telemetry.Open(s.Telemetry().Path())
		if err != nil {
			return err
		}
		snap, err := seg.Snapshot()
		seg.Close()
		if err != nil {
			return err
		}
		if tot := snap.Total(); tot.Failovers != v.Failovers() {
			return fmt.Errorf("telemetry counts %d failovers, the variable %d", tot.Failovers, v.Failovers())
		}
		if p1, p3 := snap.Peer(1), snap.Peer(3); p1 == nil || p3 == nil || p1.FailedFrom != f.From[1] || p3.ServedFor != f.To[3] {
			return fmt.Errorf("peer table: rank 1 %+v, rank 3 %+v; want failedFrom %d, servedFor %d", p1, p3, f.From[1], f.To[3])
		}
	}
	if err := filesMeet(dir, "c", s.Rank(), []int{0, 2, 3}, 60*time.Second); err != nil {
		return err
	}

	// 4. Rank 3 dies too: shard 1 has no rank left.
	if s.Rank() == 3 {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	}
	if s.Rank() == 0 {
		deadline := time.Now().Add(20 * time.Second)
		for {
			err := r.GetBatch(spec.name, all, dst)
			if err == nil {
				if time.Now().After(deadline) {
					return errors.New("reads of shard 1 succeed with ranks 1 and 3 dead")
				}
				time.Sleep(10 * time.Millisecond) // rank 3's death not seen yet
				continue
			}
			if !(errors.Is(err, ErrPeerDead) || errors.Is(err, ErrTimeout)) || !slices.Equal(fault.RanksOf(err), []int{1, 3}) {
				return fmt.Errorf("shard 1 with ranks 1 and 3 dead: got %v, want ErrPeerDead naming ranks 1 and 3", err)
			}
			w.logf("no replica left: %v", err)
			break
		}
		// Shard 0 still reads.
		if err := check("shard 0 with ranks 1 and 3 dead", r, all[:info.Shards[1]]); err != nil {
			return err
		}
	}
	r.Close()
	if err := filesMeet(dir, "d", s.Rank(), []int{0, 2}, 60*time.Second); err != nil {
		return err
	}
	t1 := time.Now()
	err = s.Close()
	w.logf("Close with ranks 1 and 3 dead took %v: %v", time.Since(t1).Round(time.Millisecond), err)
	return nil
}

// TestReplicas: UpdateReplicas' guarantee, failover from a dead owner, and
// the error when no replica is left, on the mapped and the fabric paths.
func TestReplicas(t *testing.T) {
	for _, mode := range []string{"local", "tcp"} {
		t.Run("path="+mode, func(t *testing.T) {
			res := spawnRanks(t, 4, "replicas", map[string]string{"MODE": mode, "WIDTH": "2", "FTIMEOUT": "3s", "TIMEOUT": "5s"},
				120*time.Second,
				func(r rankResult) bool {
					return (r.rank == 1 || r.rank == 3) && killedBySignal(r.err, syscall.SIGKILL)
				})
			for _, r := range []int{1, 3} {
				if !killedBySignal(res[r].err, syscall.SIGKILL) {
					t.Errorf("rank %d was not killed: %v\n%s", r, res[r].err, res[r].output)
				}
			}
		})
	}
}

func init() { scenarios["lastresort"] = scenarioLastResort }

// scenarioLastResort: 4 ranks in 2 replica groups, every read through the
// fabric. Rank 3, shard 1's only replica, is suspect, and rank 1, shard
// 1's owner in rank 0's group, is stopped (SIGSTOP). Rank 0's read of
// shard 1 misses the failover deadline, finds no replica to move to, and
// goes back to rank 1 with the fabric's hard deadline (lastResort): rank 1
// is resumed once the read has moved, the read completes, every row
// matches its pattern, and nothing counts as a failover.
func scenarioLastResort(w *worker) error {
	spec := varSpec{name: "last", dt: Bytes, rowBytes: 3072, base: 30, emptyMember: -1}
	s, err := w.openSalted(spec, false)
	if err != nil {
		return err
	}
	defer s.Close()
	dir := w.param("TELDIR", os.TempDir())
	info, _ := s.Query(spec.name)
	switch s.Rank() {
	case 1:
		// A resumer continues this process once rank 0 says so.
		resume := exec.Command("sh", "-c", fmt.Sprintf("until [ -e %s/resume ]; do sleep 0.02; done; kill -CONT %d",
			dir, os.Getpid()))
		if err := resume.Start(); err != nil {
			return err
		}
		if err := os.WriteFile(dir+"/stopping", []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
			return err
		}
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		if err := resume.Wait(); err != nil {
			return err
		}
	case 0:
		if err := lastResortRead(s, spec, info, dir); err != nil {
			return err
		}
	}
	if err := filesMeet(dir, "done", s.Rank(), []int{0, 1, 2, 3}, 120*time.Second); err != nil {
		return err
	}
	return s.Close()
}

// lastResortRead is rank 0's part of scenarioLastResort.
func lastResortRead(s *Store, spec varSpec, info VarInfo, dir string) error {
	var pid int
	for t0 := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(dir + "/stopping"); err == nil && len(b) > 0 {
			pid, _ = strconv.Atoi(string(b))
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil &&
				strings.Contains(string(st), ") T ") {
				break // stopped
			}
		}
		if time.Since(t0) > 60*time.Second {
			return errors.New("rank 1 did not stop within 60s")
		}
	}
	s.health.Suspect(3, telemetry.Nanotime()+int64(time.Hour))
	idx := seqIdx(info.Shards[1], info.Shards[2]-info.Shards[1])
	dst := make([]byte, int64(len(idx))*spec.rowBytes)
	poison(dst)
	done := make(chan error, 1)
	go func() { done <- s.GetBatch(spec.name, idx, dst) }()
	// The read missed the failover deadline once rank 1 is suspect.
	for t0 := time.Now(); !s.health.Suspected(1); time.Sleep(5 * time.Millisecond) {
		if time.Since(t0) > 60*time.Second {
			return errors.New("the read of stopped rank 1 did not miss the failover deadline within 60s")
		}
	}
	if err := os.WriteFile(dir+"/resume", nil, 0o600); err != nil {
		return err
	}
	if err := <-done; err != nil {
		return fmt.Errorf("read of shard 1 back from its owner after no replica was left: %w", err)
	}
	if err := checkRows(dst, spec.rowBytes, spec.salt(0), idx); err != nil {
		return err
	}
	if f := s.Failovers(); f.From[1] != 0 || f.To[3] != 0 {
		return fmt.Errorf("failovers %+v: want none (the owner served the rows)", f)
	}
	return nil
}

// TestLastResortOwner: a read whose owner stalls while its only replica
// is suspect goes back to the owner and completes (tcp one-sided reads
// and gather requests).
func TestLastResortOwner(t *testing.T) {
	for _, mode := range []string{"tcp-rma", "tcp-gather"} {
		t.Run("path="+mode, func(t *testing.T) {
			spawnRanks(t, 4, "lastresort", map[string]string{"MODE": mode, "WIDTH": "2", "FAILOVER": "300ms",
				"FTIMEOUT": "60s", "LIVENESS": "120s", "RING_DEAD": "120s"}, 120*time.Second, nil)
		})
	}
}
