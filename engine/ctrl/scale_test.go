package ctrl

// The scale simulation: N ranks of the real control plane over real
// sockets, in this process (TestScale1024, part of make test) or spread
// over re-executed copies of the test binary (make ctrl-scale), since one
// process may hold at most 20 000 descriptors here.

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddstore/ddstore/internal/testkit"
)

var (
	flagWorlds  = flag.String("ctrl.worlds", "", "scale run: comma-separated world sizes (make ctrl-scale)")
	flagPPN     = flag.String("ctrl.ppn", "8", "scale run: comma-separated ranks per node")
	flagPerProc = flag.Int("ctrl.perproc", 2000, "scale run: ranks per worker process")
	flagBigMax  = flag.Int("ctrl.bigmax", 256, "scale run: largest world that runs the 800 KB all-reduce (every rank holds 1.6 MB meanwhile)")
	flagMedMax  = flag.Int("ctrl.medmax", 1024, "scale run: largest world that runs the 80 KB all-reduce")
	flagDead    = flag.Duration("ctrl.deadafter", 0, "scale run: DeadAfter of every rank, SuspectAfter two thirds of it (0: the defaults); "+
		"for the 800 KB all-reduce beyond 1 024 ranks, where one machine doing every rank's work starves agents past 3.6 s")
	flagOut    = flag.String("ctrl.out", "", "scale run: write the results as JSON here, and an SVG beside it")
	flagWorker = flag.String("ctrl.worker", "", "internal: world,ppn,n0,n1,job of a worker process")
)

// scaleResult is one run's figures.
type scaleResult struct {
	World, PPN, Nodes, Procs int
	BootS                    float64 // wall time of the bootstrap, every rank
	MaxAgentConns            int
	MaxPlainConns            int
	HBAgentPerS, HBPlainPerS float64 // liveness messages per second, the busiest agent / plain rank
	MemPerRankKiB            float64 // resident memory of the workers, over their ranks
	TablePerNodeKiB          float64
	AR8us, AR80Kms, AR800Kms float64 // all-reduce latency (warm); 800 KB only up to -ctrl.bigmax ranks
	Rounds8, Msgs8           int     // 8-byte all-reduce: critical path, messages per agent
	KillKnownMs              float64 // an agent killed: every rank knows after
	LoadAvg                  string
}

// driver is one host, in this process or a worker process.
type driver interface {
	call(cmd string) (string, error)
}

type localDriver struct{ h *host }

type procDriver struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func (d *procDriver) call(cmd string) (string, error) {
	if _, err := fmt.Fprintln(d.in, cmd); err != nil {
		return "", err
	}
	line, err := d.out.ReadString('\n')
	line = strings.TrimSpace(line)
	if strings.HasPrefix(line, "error ") {
		return "", fmt.Errorf("worker: %s", line[6:])
	}
	return line, err
}

func (d localDriver) call(cmd string) (string, error) { return d.h.command(cmd) }

// command runs one step of the scale run on this host; the answer is one
// line.
func (h *host) command(line string) (string, error) {
	f := strings.Fields(line)
	arg := func(i int) int {
		if i < len(f) {
			v, _ := strconv.Atoi(f[i])
			return v
		}
		return 0
	}
	switch f[0] {
	case "boot":
		errs := h.start(strings.Split(f[1], ","), nil)
		if err := firstErr(errs); err != nil {
			return "", err
		}
		return "ok", nil
	case "check":
		return "ok", h.checkTables()
	case "allreduce": // floats reps: µs per all-reduce, rounds, max agent messages per call
		n, reps := arg(1), arg(2)
		before := make([]Stats, len(h.ctrls))
		for i, c := range h.ctrls {
			before[i] = c.Stats()
		}
		t0 := time.Now()
		err := firstErr(h.each(func(c *Ctrl) error {
			x := make([]float32, n)
			for rep := 0; rep < reps; rep++ {
				for i := range x {
					x[i] = intValueOf(c.Rank(), i)
				}
				if err := c.AllReduceFloat32("scale", x, 0); err != nil {
					return err
				}
			}
			want := float32(0)
			for r := 0; r < h.lay.world; r++ {
				want += intValueOf(r, n-1)
			}
			if x[n-1] != want {
				return fmt.Errorf("rank %d: element %d is %v, want %v", c.Rank(), n-1, x[n-1], want)
			}
			return nil
		}))
		us := float64(time.Since(t0).Microseconds()) / float64(reps)
		rounds, msgs := 0, 0
		for i, c := range h.ctrls {
			s := c.Stats()
			rounds = max(rounds, s.Rounds)
			if c.Agent() {
				msgs = max(msgs, int(s.AgentMsgs-before[i].AgentMsgs)/reps)
			}
		}
		return fmt.Sprintf("%.1f %d %d", us, rounds, msgs), err
	case "stats": // max agent conns, max plain conns, table bytes, resident KiB
		a, p, tb := 0, 0, 0
		for _, c := range h.ctrls {
			s := c.Stats()
			if c.Agent() {
				a = max(a, s.Conns)
			} else {
				p = max(p, s.Conns)
			}
			tb = s.TableBytes
		}
		return fmt.Sprintf("%d %d %d %d", a, p, tb, rssKiB()), nil
	case "hb": // liveness messages over arg(1) ms: busiest agent, busiest plain (counts)
		before := make([]Stats, len(h.ctrls))
		for i, c := range h.ctrls {
			before[i] = c.Stats()
		}
		time.Sleep(time.Duration(arg(1)) * time.Millisecond)
		a, p := uint64(0), uint64(0)
		for i, c := range h.ctrls {
			d := c.Stats().HBSent - before[i].HBSent
			if c.Agent() {
				a = max(a, d)
			} else {
				p = max(p, d)
			}
		}
		return fmt.Sprintf("%d %d", a, p), nil
	case "kill":
		r := arg(1)
		if r >= h.lo && r < h.hi {
			h.ctrls[r-h.lo].kill()
		}
		return "ok", nil
	case "learned": // rank timeout-ms: unix ns when the last rank here learned
		r, limit := arg(1), time.Now().Add(time.Duration(arg(2))*time.Millisecond)
		for {
			var last int64
			missing := 0
			for _, c := range h.ctrls {
				if c.killed.Load() {
					continue
				}
				if !c.Dead(r) {
					missing++
				} else if f := c.FirstDeath().UnixNano(); f > last {
					last = f
				}
			}
			if missing == 0 {
				return strconv.FormatInt(last, 10), nil
			}
			if time.Now().After(limit) {
				return "", fmt.Errorf("%d ranks do not know of rank %d", missing, r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	case "quit":
		h.close()
		return "ok", nil
	}
	return "", fmt.Errorf("unknown command %q", line)
}

func rssKiB() int {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			v, _ := strconv.Atoi(strings.Fields(l)[1])
			return v
		}
	}
	return 0
}

// TestScaleWorker is a worker process of the scale run (flag -ctrl.worker).
func TestScaleWorker(t *testing.T) {
	if *flagWorker == "" {
		t.Skip("a worker process of the scale run")
	}
	var world, ppn, n0, n1 int
	var job string
	if _, err := fmt.Sscanf(strings.ReplaceAll(*flagWorker, ",", " "), "%d %d %d %d %s", &world, &ppn, &n0, &n1, &job); err != nil {
		t.Fatal(err)
	}
	raiseFDs(t)
	base := rssKiB()
	h, addrs, err := newHost(newLayout(world, ppn), job, n0, n1, deadAfterFlag())
	if err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println(strings.Join(addrs, ","), base)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		out, err := h.command(in.Text())
		if err != nil {
			fmt.Println("error", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		fmt.Println(out)
		if in.Text() == "quit" {
			return
		}
	}
}

// runScale runs the whole scale sequence for world ranks, ppn per node,
// over procs worker processes (0: in this process).
func runScale(t *testing.T, world, ppn, procs, bigReps, bigMax int, tune func(*Options)) scaleResult {
	res := scaleResult{World: world, PPN: ppn, Procs: max(procs, 1)}
	lay := newLayout(world, ppn)
	res.Nodes = lay.nodes
	job := fmt.Sprintf("s%d-%d", os.Getpid(), jobSeq.Add(1))
	var ds []driver
	var agents []string
	var baseKiB []int
	if procs <= 0 {
		raiseFDs(t)
		baseKiB = []int{rssKiB()}
		h, addrs, err := newHost(lay, job, 0, lay.nodes, tune)
		if err != nil {
			t.Fatal(err)
		}
		ds, agents = []driver{localDriver{h}}, addrs
	} else {
		for i := 0; i < procs; i++ {
			n0, n1 := i*lay.nodes/procs, (i+1)*lay.nodes/procs
			cmd := exec.Command(os.Args[0], "-test.run=^TestScaleWorker$", "-test.timeout=30m",
				fmt.Sprintf("-ctrl.worker=%d,%d,%d,%d,%s", world, ppn, n0, n1, job), fmt.Sprintf("-ctrl.deadafter=%v", *flagDead))
			cmd.Stderr = os.Stderr
			in, _ := cmd.StdinPipe()
			outp, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			d := &procDriver{cmd: cmd, in: in, out: bufio.NewReaderSize(outp, 1<<20)}
			line, err := d.out.ReadString('\n')
			f := strings.Fields(line)
			if err != nil || len(f) != 2 {
				t.Fatalf("worker %d: %q %v", i, line, err)
			}
			agents = append(agents, strings.Split(f[0], ",")...)
			b, _ := strconv.Atoi(f[1])
			baseKiB = append(baseKiB, b)
			ds = append(ds, d)
			t.Cleanup(func() { in.Close(); cmd.Wait() })
		}
	}
	all := func(cmd string) []string {
		defer func(t0 time.Time) {
			if testing.Verbose() {
				fmt.Fprintf(os.Stderr, "ctrl scale %d/%d: %.40s: %v\n", world, ppn, cmd, time.Since(t0).Round(time.Millisecond))
			}
		}(time.Now())
		out := make([]string, len(ds))
		errs := make([]error, len(ds))
		var wg sync.WaitGroup
		for i, d := range ds {
			wg.Add(1)
			go func() { defer wg.Done(); out[i], errs[i] = d.call(cmd) }()
		}
		wg.Wait()
		if err := firstErr(errs); err != nil {
			t.Fatalf("%s: %v", strings.Fields(cmd)[0], err)
		}
		return out
	}
	t0 := time.Now()
	all("boot " + strings.Join(agents, ","))
	res.BootS = time.Since(t0).Seconds()
	all("check")
	var tableBytes int
	totalKiB := 0
	for i, s := range all("stats") {
		var a, p, tb, rss int
		fmt.Sscan(s, &a, &p, &tb, &rss)
		res.MaxAgentConns, res.MaxPlainConns = max(res.MaxAgentConns, a), max(res.MaxPlainConns, p)
		tableBytes = tb
		totalKiB += rss - baseKiB[i]
	}
	res.MemPerRankKiB = float64(totalKiB) / float64(world)
	res.TablePerNodeKiB = float64(tableBytes) / 1024
	ar := func(n, reps int) (float64, int, int) {
		if n < 1000 {
			all(fmt.Sprintf("allreduce %d 1", n)) // connects the partners (the large one uses the same)
		}
		us, rounds, msgs := 0.0, 0, 0
		for _, s := range all(fmt.Sprintf("allreduce %d %d", n, reps)) {
			var u float64
			var r, m int
			fmt.Sscan(s, &u, &r, &m)
			us, rounds, msgs = math.Max(us, u), max(rounds, r), max(msgs, m)
		}
		return us, rounds, msgs
	}
	res.AR8us, res.Rounds8, res.Msgs8 = ar(2, 10)
	var us float64
	if world <= *flagMedMax {
		us, _, _ = ar(20000, bigReps)
		res.AR80Kms = us / 1000
	}
	if world <= bigMax {
		us, _, _ = ar(200000, bigReps)
		res.AR800Kms = us / 1000
	}
	const window = 5000
	for _, s := range all(fmt.Sprintf("hb %d", window)) {
		var a, p float64
		fmt.Sscan(s, &a, &p)
		res.HBAgentPerS = math.Max(res.HBAgentPerS, a/(window/1000.0))
		res.HBPlainPerS = math.Max(res.HBPlainPerS, p/(window/1000.0))
	}
	victim := lay.nodes / 2 * ppn // the agent of the middle node
	tk := time.Now()
	all(fmt.Sprintf("kill %d", victim))
	var last int64
	for _, s := range all(fmt.Sprintf("learned %d 10000", victim)) {
		v, _ := strconv.ParseInt(s, 10, 64)
		last = max(last, v)
	}
	res.KillKnownMs = float64(time.Unix(0, last).Sub(tk).Microseconds()) / 1000
	la, _ := os.ReadFile("/proc/loadavg")
	res.LoadAvg = strings.Join(strings.Fields(string(la))[:3], " ")
	all("quit")
	return res
}

func (r scaleResult) String() string {
	big, med := "not run", "not run"
	if r.AR800Kms > 0 {
		big = fmt.Sprintf("%.0f", r.AR800Kms)
	}
	if r.AR80Kms > 0 {
		med = fmt.Sprintf("%.0f", r.AR80Kms)
	}
	return fmt.Sprintf("| %d | %d | %d | %d | %.2f | %d | %d | %.2f / %.2f | %.0f | %.0f | %.0f | %d / %d | %s | %s | %.1f | %s |",
		r.World, r.PPN, r.Nodes, r.Procs, r.BootS, r.MaxAgentConns, r.MaxPlainConns, r.HBAgentPerS, r.HBPlainPerS,
		r.MemPerRankKiB, r.TablePerNodeKiB, r.AR8us, r.Rounds8, r.Msgs8, med, big, r.KillKnownMs, r.LoadAvg)
}

const scaleHeader = "| ranks | per node | nodes | procs | bootstrap s | max conns agent | plain | liveness msgs/s agent / plain | RSS KiB/rank | table KiB/node | all-reduce 8 B µs | rounds / msgs per agent | all-reduce 80 KB ms | all-reduce 800 KB ms | killed agent known everywhere ms | load avg |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"

// checkGoals asserts the goals that hold at any size.
func checkGoals(t *testing.T, r scaleResult) {
	t.Helper()
	checkCounts(t, r)
	if r.HBAgentPerS > 2.2 || r.KillKnownMs > 6000 || r.MemPerRankKiB > 2048 {
		t.Errorf("%d ranks: %.2f liveness messages per agent per second, killed rank known everywhere after %.0f ms, %.0f KiB per rank",
			r.World, r.HBAgentPerS, r.KillKnownMs, r.MemPerRankKiB)
	}
}

// checkCounts checks the goals that count (connections, rounds, messages)
// rather than time or memory.
func checkCounts(t *testing.T, r scaleResult) {
	t.Helper()
	if r.MaxAgentConns > 40 || (r.PPN > 1 && r.MaxPlainConns != 1) {
		t.Errorf("%d ranks: %d connections on an agent, %d on a plain rank (goals 40, 1)", r.World, r.MaxAgentConns, r.MaxPlainConns)
	}
	if r.Rounds8 > CeilLog2(r.Nodes)+2 || r.Msgs8 > 2*CeilLog2(r.Nodes)+4 {
		t.Errorf("%d nodes: 8-byte all-reduce in %d rounds, %d messages per agent", r.Nodes, r.Rounds8, r.Msgs8)
	}
}

// TestScale1024 runs 1 024 ranks, 8 per node, in this process, within
// make test: it shares 2 cores with every other package, so only a killed
// rank (EOF) may be declared dead, not one whose heartbeats the load
// delayed (the default deadlines are measured by make ctrl-scale and the
// liveness tests). Under the race detector, whose goroutines run several
// times slower and whose memory is several times larger, it runs 256
// ranks and checks the counts alone (connections, rounds, messages).
func TestScale1024(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	patient := func(o *Options) { o.SuspectAfter, o.DeadAfter = 20*time.Second, 30*time.Second }
	if testkit.Race {
		r := runScale(t, 256, 8, 0, 1, 0, patient)
		t.Logf("\n%s\n%s", scaleHeader, r)
		checkCounts(t, r)
		return
	}
	r := runScale(t, 1024, 8, 0, 1, 0, patient)
	t.Logf("\n%s\n%s", scaleHeader, r)
	checkGoals(t, r)
	if r.BootS > 10 {
		t.Errorf("bootstrap of 1 024 ranks took %.1f s", r.BootS)
	}
}

// deadAfterFlag is -ctrl.deadafter as a tune of Options (nil: defaults).
func deadAfterFlag() func(*Options) {
	if *flagDead <= 0 {
		return nil
	}
	return func(o *Options) { o.SuspectAfter, o.DeadAfter = *flagDead*2/3, *flagDead }
}

// TestScaleRun is make ctrl-scale: -ctrl.worlds, -ctrl.ppn, -ctrl.out.
func TestScaleRun(t *testing.T) {
	if *flagWorlds == "" {
		t.Skip("make ctrl-scale")
	}
	var results []scaleResult
	for _, ws := range strings.Split(*flagWorlds, ",") {
		for _, ps := range strings.Split(*flagPPN, ",") {
			w, _ := strconv.Atoi(ws)
			p, _ := strconv.Atoi(ps)
			procs := (w + *flagPerProc - 1) / *flagPerProc
			r := runScale(t, w, p, procs, 3, *flagBigMax, deadAfterFlag())
			fmt.Println(r)
			checkGoals(t, r)
			results = append(results, r)
			runtime.GC()
		}
	}
	fmt.Printf("%s\n", scaleHeader)
	for _, r := range results {
		fmt.Println(r)
	}
	if *flagOut != "" {
		b, _ := json.MarshalIndent(results, "", " ")
		if err := os.WriteFile(*flagOut, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := plotScale(results, strings.TrimSuffix(*flagOut, ".json")+".svg"); err != nil {
			t.Fatal(err)
		}
	}
}
