package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/ddstore/ddstore/fabric"
)

func init() { scenarios["quarantine"] = scenarioQuarantine }

// scenarioQuarantine: 4 ranks on shm in 2 replica groups. Rank 0's shared
// reader gets a provider call that never returns (injected: the call
// spins as on a stopped peer's lock until the fabric's watchdog abandons
// it and quarantines the reader). The same GetBatch still returns every
// row, the stuck owner's from its replica on a new reader, and later calls
// through the store and a new Reader keep working; every row is checked.
func scenarioQuarantine(w *worker) error {
	spec := varSpec{name: "q", dt: Bytes, rowBytes: 3072, base: 40, emptyMember: -1}
	s, err := w.openSalted(spec, false)
	if err != nil {
		return err
	}
	defer s.Close()
	salt := spec.salt(0)
	info, err := s.Query(spec.name)
	if err != nil {
		return err
	}
	all := seqIdx(0, info.GlobalRows)
	dst := make([]byte, int64(len(all))*spec.rowBytes)
	check := func(what string, g getter) error {
		poison(dst)
		if err := g.GetBatch(spec.name, all, dst); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := checkRows(dst, spec.rowBytes, salt, all); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if s.Rank() == 0 {
		if err := check("before", s); err != nil {
			return err
		}
		q0 := fabric.QuarantinedReaders()
		fabric.InjectStuckCalls(1)
		err := check("a provider call stuck", s)
		fabric.InjectStuckCalls(0)
		if err != nil {
			return err
		}
		if q := fabric.QuarantinedReaders() - q0; q != 1 {
			return fmt.Errorf("%d readers quarantined, want 1 (the stuck call was not abandoned)", q)
		}
		// The stuck call's reads went to rank 1 (rank 0's own shard is
		// mapped); the replica, rank 3, served them.
		if f := s.Failovers(); f.From[1] == 0 || f.To[3] == 0 {
			return fmt.Errorf("failovers %+v: want rank 1's rows served by rank 3", f)
		}
		if err := check("the store after the quarantine", s); err != nil {
			return err
		}
		r, err := s.NewReader()
		if err != nil {
			return err
		}
		defer r.Close()
		if err := check("a new Reader", r); err != nil {
			return err
		}
	}
	return s.Barrier()
}

// TestQuarantinedReaderRenewed: see scenarioQuarantine. Without renewal,
// the shared reader refuses every call after the quarantine, and the
// failover retry of the stuck call itself fails.
func TestQuarantinedReaderRenewed(t *testing.T) {
	spawnRanks(t, 4, "quarantine", map[string]string{"MODE": "shm", "WIDTH": "2", "FAILOVER": "1s"},
		90*time.Second, nil)
}
