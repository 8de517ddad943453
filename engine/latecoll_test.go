package engine

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/telemetry"
)

func init() { scenarios["latecoll"] = scenarioLateCollective }

// TestLateRankAndCloseAfterFailure: rank 2 reaches a collective (Add)
// after the others gave up on it. The others' error names it; its own
// says that they gave up, and when. Then Close succeeds on every rank and
// leaves no shard file (spawnRanks checks) and no telemetry segment.
func TestLateRankAndCloseAfterFailure(t *testing.T) {
	spawnRanks(t, 3, "latecoll", map[string]string{"MODE": "local", "TIMEOUT": "1s"}, 60*time.Second, nil)
}

func scenarioLateCollective(w *worker) error {
	spec := varSpec{name: "x", dt: Int64, rowBytes: 64, base: 50, emptyMember: -1}
	s, err := w.openWith(spec)
	if err != nil {
		return err
	}
	if _, err := checkVar(s, s, spec, rand.New(rand.NewSource(int64(w.rank)))); err != nil {
		return err
	}
	if w.rank == 2 {
		time.Sleep(2500 * time.Millisecond) // the others' timeout is 1 s
	}
	err = s.Add("y", Int64, 1, make([]byte, 8))
	switch {
	case err == nil:
		return errors.New("Add succeeded with a rank 1.5 s past the others' timeout")
	case w.rank != 2 && (!errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "rank 2 did not arrive within 1s")):
		return fmt.Errorf("on time, Add: %v; want ErrTimeout naming rank 2", err)
	case w.rank == 2 && (!errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "gave up on this collective at ") ||
		!strings.Contains(err.Error(), "before this rank got there") || !strings.Contains(err.Error(), "rank 2 did not arrive within 1s")):
		return fmt.Errorf("late rank, Add: %v; want ErrTimeout saying the others gave up on it", err)
	}
	w.logf("rank %d: %v", w.rank, err)
	if err := s.Barrier(); !errors.Is(err, ErrClosed) {
		return fmt.Errorf("Barrier after a failed collective: %v, want ErrClosed", err)
	}
	seg := telemetry.SegmentPath(w.param("TELDIR", ""), s.Job(), w.rank)
	if _, err := os.Stat(seg); err != nil {
		return fmt.Errorf("no telemetry segment before Close: %v", err)
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("Close after a failed collective: %v, want nil", err)
	}
	if _, err := os.Stat(seg); !os.IsNotExist(err) {
		return fmt.Errorf("telemetry segment %s still there after Close: %v", filepath.Base(seg), err)
	}
	return nil
}
