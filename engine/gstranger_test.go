package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"testing"

	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/internal/testkit"
	"github.com/ddstore/ddstore/telemetry"
	"github.com/ddstore/ddstore/ui/data"
	"github.com/ddstore/ddstore/ui/diagnose"
)

// From a stranger to ddtop's finding, end to end: a live 4-rank tcp job
// (reads gathered) whose rank 0 starts a stranger, a separate process that
// knows rank 0's fabric address, memory key and base but not the job's
// gather key, and sends gatherStrangerCalls gather requests. None gets
// data; ddtop's model of rank 0's real telemetry segment (ui/data's
// Poller, ui/diagnose) then holds the process finding naming the count;
// and the job reads every row before, while and after, each checked.

const (
	gstrangerEnv        = "DDT_GSTRANGER" // a gstrangerSpec in JSON
	gatherStrangerCalls = 5
)

func init() { scenarios["gstranger"] = scenarioGatherStranger }

func TestGatherStrangerFinding(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	spawnRanks(t, 4, "gstranger", map[string]string{"MODE": "tcp"}, 120*time.Second, nil)
}

func scenarioGatherStranger(w *worker) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	defer s.Close()
	if s.fab == nil || !s.fab.Info().SoftwareRMA {
		return fmt.Errorf("mode %s: no software-RMA fabric (gather) opened", w.mode)
	}
	spec := specFor(3072)
	if err := addPattern(s, spec); err != nil {
		return err
	}
	r, err := s.NewReader()
	if err != nil {
		return err
	}
	defer r.Close()
	salt := spec.salt(s.Group())
	if err := readAllChecked(r, s, spec, salt); err != nil {
		return fmt.Errorf("before the stranger: %w", err)
	}
	if s.Rank() == 0 {
		v, err := s.Var(spec.name)
		if err != nil {
			return err
		}
		// One bit off the job's key: nothing a stranger could not guess.
		wrong := s.opts.Fabric.GatherKey ^ 1<<29
		done := make(chan error, 1)
		go func() {
			done <- runGatherStranger(s.fab.Address(), v.exp.Key(), v.exp.Base(), wrong, gatherStrangerCalls)
		}()
		// The job reads on while the stranger asks.
		if err := readAllChecked(r, s, spec, salt); err != nil {
			return fmt.Errorf("while the stranger asked: %w", err)
		}
		if err := <-done; err != nil {
			return err
		}
		if err := strangerFinding(w, s, gatherStrangerCalls); err != nil {
			return err
		}
	}
	if err := s.Barrier(); err != nil {
		return err
	}
	if err := readAllChecked(r, s, spec, salt); err != nil {
		return fmt.Errorf("after the stranger: %w", err)
	}
	if n := fabric.GatherStrangers(); s.Rank() != 0 && n != 0 {
		return fmt.Errorf("rank %d counted %d strangers; only rank 0 was asked", s.Rank(), n)
	}
	return s.Barrier()
}

// readAllChecked reads every global row of spec in batches of 256 and
// checks each against its pattern.
func readAllChecked(r *Reader, s *Store, spec varSpec, salt uint64) error {
	info, err := s.Query(spec.name)
	if err != nil {
		return err
	}
	const batch = 256
	buf := make([]byte, batch*spec.rowBytes)
	idx := make([]int64, 0, batch)
	for start := int64(0); start < info.GlobalRows; start += batch {
		idx = idx[:0]
		for g := start; g < min(start+batch, info.GlobalRows); g++ {
			idx = append(idx, g)
		}
		clear(buf)
		got := buf[:int64(len(idx))*spec.rowBytes]
		if err := r.GetBatch(spec.name, idx, got); err != nil {
			return fmt.Errorf("rows %d..: %w", start, err)
		}
		if err := checkRows(got, spec.rowBytes, salt, idx); err != nil {
			return err
		}
	}
	return nil
}

// runGatherStranger runs the stranger process (fabric.TryGather with key
// gkey, in the test binary re-executed) and checks that none of its calls
// got data.
func runGatherStranger(addr []byte, key, base, gkey uint64, calls int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second*testkit.RaceScale)
	defer cancel()
	spec, err := json.Marshal(gstrangerSpec{addr, key, base, gkey, calls, time.Second * testkit.RaceScale})
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(cleanEnv(), gstrangerEnv+"="+string(spec))
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("stranger: %v\n%s", err, out)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		g, err := fabric.ParseGatherTry(line)
		if err != nil {
			return fmt.Errorf("stranger: %w", err)
		}
		n++
		if g.OK || !g.TimedOut || !g.Untouched {
			return fmt.Errorf("stranger call %d: %q: want no data (unanswered, timed out, destination untouched)", n, line)
		}
	}
	if n != calls {
		return fmt.Errorf("stranger reported %d calls, want %d:\n%s", n, calls, out)
	}
	return nil
}

// gstrangerSpec is what the stranger process is told.
type gstrangerSpec struct {
	Addr            []byte
	Key, Base, GKey uint64
	Calls           int
	Timeout         time.Duration
}

// gatherStrangerMain is the stranger process: gather requests of one 3 KB
// row each with the spec's gather key, one line per call.
func gatherStrangerMain(js string) int {
	var sp gstrangerSpec
	if err := json.Unmarshal([]byte(js), &sp); err != nil {
		fmt.Fprintf(os.Stderr, "bad stranger spec %q: %v\n", js, err)
		return 2
	}
	o := fabric.Options{Provider: "tcp;ofi_rxm", Domain: "lo", GatherKey: sp.GKey, Timeout: sp.Timeout}
	return fabric.StrangerMain(o, sp.Addr, sp.Key, sp.Base, 3072, sp.Calls)
}

// strangerFinding waits (the heartbeat publishes the count every 500 ms)
// until ddtop's model of this rank's segment counts want gather strangers,
// and checks that its diagnosis names them.
func strangerFinding(w *worker, s *Store, want int) error {
	p, err := data.NewPoller(data.Options{Dir: w.param("TELDIR", ""), Job: s.Job()})
	if err != nil {
		return err
	}
	defer p.Close()
	deadline := time.Now().Add(20 * time.Second * testkit.RaceScale)
	var last string
	for time.Now().Before(deadline) {
		f, err := p.Poll()
		if err != nil {
			return err
		}
		for _, rk := range f.Ranks {
			if rk.Rank != s.Rank() {
				continue
			}
			last = fmt.Sprintf("gather_strangers = %d", rk.Proc[telemetry.ProcGatherStrangers])
			if rk.Proc[telemetry.ProcGatherStrangers] < int64(want) {
				continue
			}
			if n := rk.Proc[telemetry.ProcGatherStrangers]; n != int64(want) {
				return fmt.Errorf("segment counts %d gather strangers, want %d", n, want)
			}
			for _, fd := range diagnose.Diagnose(f, diagnose.Thresholds{}) {
				if fd.Rule == diagnose.RuleProcess && fd.Rank == s.Rank() &&
					strings.Contains(fd.Evidence, fmt.Sprintf("gather_strangers = %d:", want)) && strings.Contains(fd.Evidence, "dropped unanswered") {
					w.logf("ddtop finding: %s: %s", fd.Rule, fd.Evidence)
					return nil
				}
			}
			return fmt.Errorf("segment counts %d strangers but no process finding names them: %+v", want, diagnose.Diagnose(f, diagnose.Thresholds{}))
		}
		p.Recycle(f)
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("ddtop's model of rank %d never counted %d gather strangers (last: %s)", s.Rank(), want, last)
}
