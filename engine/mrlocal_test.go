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
// registered at most once per (worker reader, pooled buffer) pair and then
// cached: over 4 epochs the registrations stay within PoolSize × Workers
// while the calls keep reading remote rows, every row checked against its
// pattern. Gather is left out: it runs only on software-RMA providers (tcp,
// sockets, udp), which never need FI_MR_LOCAL, and its replies are tagged
// messages it does not register.
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
	const workers, epochs = 2, 4
	l, err := s.NewLoader(LoaderOptions{Vars: []string{spec.name}, BatchSize: 32, Seed: 3, Shuffle: true,
		Workers: workers, Prefetch: 2, BatchGet: true, FastCollate: true, ThreadReaders: true})
	if err != nil {
		return err
	}
	defer l.Close()
	salt := spec.salt(s.Group())
	perEpoch := make([]int64, epochs)
	var prev telemetry.Counters
	for ep := range epochs {
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
		c, err := varCounters(s, spec.name)
		if err != nil {
			return err
		}
		if c.RemoteRows == prev.RemoteRows {
			return fmt.Errorf("epoch %d: no remote row read over the fabric", ep)
		}
		perEpoch[ep] = c.MRRegs - prev.MRRegs
		prev = c
	}
	bound := int64(l.PoolSize() * workers)
	w.logf("%s: registrations per epoch %v in %d calls (%d remote rows); bound %d (pool %d × %d readers)",
		w.mode, perEpoch, prev.Calls, prev.RemoteRows, bound, l.PoolSize(), workers)
	if prev.MRRegs == 0 {
		return fmt.Errorf("0 registrations in %d calls: registration is not forced", prev.Calls)
	}
	if prev.MRRegs > bound {
		return fmt.Errorf("%d registrations in %d calls (per epoch %v), want at most %d: once per pooled buffer and reader",
			prev.MRRegs, prev.Calls, perEpoch, bound)
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
