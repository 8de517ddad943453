package engine

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/ddstore/ddstore/telemetry"
)

func init() { scenarios["loader-mrlocal"] = scenarioLoaderMRLocal }

// TestLoaderLocalMR: with registration of every destination forced (as
// FI_MR_LOCAL providers need), the loader's off-heap batch buffers are
// registered once per worker reader and then cached: after a warm-up epoch,
// a second epoch makes 0 registrations per call while it reads remote rows,
// every row checked against its pattern. Gather is left out: it runs only
// on software-RMA providers (tcp, sockets, udp), which never need
// FI_MR_LOCAL, and its replies are tagged messages it does not register.
func TestLoaderLocalMR(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	for _, mode := range []string{"tcp-rma", "shm"} {
		t.Run("path="+mode, func(t *testing.T) {
			spawnRanks(t, 2, "loader-mrlocal", map[string]string{"MODE": mode, "REGDST": "1"}, 60*time.Second, nil)
		})
	}
}

func scenarioLoaderMRLocal(w *worker) error {
	spec := varSpec{name: "mrl", dt: Int32, rowBytes: 256, base: 300, emptyMember: -1}
	s, err := w.openWith(spec)
	if err != nil {
		return err
	}
	defer s.Close()
	l, err := s.NewLoader(LoaderOptions{Vars: []string{spec.name}, BatchSize: 32, Seed: 3, Shuffle: true,
		Workers: 2, Prefetch: 2, BatchGet: true, FastCollate: true, ThreadReaders: true})
	if err != nil {
		return err
	}
	defer l.Close()
	salt := spec.salt(s.Group())
	var before, after telemetry.Counters
	for ep := range 2 {
		if ep == 1 {
			if before, err = varCounters(s, spec.name); err != nil {
				return err
			}
		}
		e, err := l.Epoch(ep)
		if err != nil {
			return err
		}
		for nb := 0; ; nb++ {
			b, err := e.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("epoch %d batch %d: %w", ep, nb, err)
			}
			if err := checkRows(b.Data[0], spec.rowBytes, salt, b.Indices); err != nil {
				return fmt.Errorf("epoch %d batch %d: %w", ep, nb, err)
			}
			b.Release()
		}
	}
	if after, err = varCounters(s, spec.name); err != nil {
		return err
	}
	calls, remote, regs := after.Calls-before.Calls, after.RemoteRows-before.RemoteRows, after.MRRegs-before.MRRegs
	w.logf("%s: warm-up epoch %d registrations in %d calls; second epoch %d registrations in %d calls (%d remote rows)",
		w.mode, before.MRRegs, before.Calls, regs, calls, remote)
	if before.MRRegs == 0 {
		return fmt.Errorf("warm-up epoch: 0 registrations in %d calls: registration is not forced", before.Calls)
	}
	if calls == 0 || remote == 0 {
		return fmt.Errorf("second epoch: %d calls, %d remote rows: nothing read over the fabric", calls, remote)
	}
	if regs != 0 {
		return fmt.Errorf("second epoch: %d registrations in %d calls, want 0 (off-heap batch buffers registered once)", regs, calls)
	}
	return nil
}

// varCounters is variable name's totals in the store's telemetry segment.
func varCounters(s *Store, name string) (telemetry.Counters, error) {
	seg, err := telemetry.Open(s.Telemetry().Path())
	if err != nil {
		return telemetry.Counters{}, err
	}
	defer seg.Close()
	snap, err := seg.Snapshot()
	if err != nil {
		return telemetry.Counters{}, err
	}
	v := snap.Var(name)
	if v == nil {
		return telemetry.Counters{}, fmt.Errorf("telemetry: no variable %q", name)
	}
	return v.Total(), nil
}
