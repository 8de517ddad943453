// Command ddtopcost measures what ddtop costs in CPU time: it writes the
// telemetry of a synthetic job (telemetry/synthetic: --segments ranks, two
// variables each, --calls calls a second per rank recorded from one
// goroutine every 10 ms), then runs
//
//   - ddtop in the ranks view at --interval (default 100ms: 10 Hz) in a
//     pseudo-terminal (script(1)), and
//   - ddtop serve, scraped once a second,
//
// each for --warmup and then --for, and reports each one's CPU time
// (user+system) as a share of one core, twice:
//
//   - whole run: from wait4's rusage, start-up included (process start,
//     configuration, the first opening of every segment) and, for the
//     terminal run, script's relaying of the output;
//   - steady: ddtop's own CPU time over --for after the warm-up, read
//     from /proc/<pid>/stat at both ends: what a monitor left running
//     costs.
//
// Run it under flock /work/bench.lock on a shared machine; make
// ddtop-cost builds and runs it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ddstore/ddstore/cmd/ddrun/launch"
	"github.com/ddstore/ddstore/telemetry/synthetic"
)

func main() {
	ddtop := flag.String("ddtop", "bin/ddtop", "ddtop binary")
	base := flag.String("base", "", "a second ddtop binary: alternate the two in the ranks view, --pairs times, and print the ratio ddtop ÷ base")
	pairs := flag.Int("pairs", 1, "ranks-view runs of each binary (with --base: alternated, the order swapping each pair); at least 1")
	ranks := flag.Bool("ranks", true, "measure the ranks view in a terminal")
	serve := flag.Bool("serve", true, "also measure ddtop serve (of --ddtop), scraped once a second")
	n := flag.Int("segments", 64, "synthetic segments")
	rate := flag.Float64("calls", 200, "calls per second per segment (a loader batch every second call)")
	interval := flag.Duration("interval", 100*time.Millisecond, "ddtop refresh interval")
	dur := flag.Duration("for", 30*time.Second, "how long each steady measurement runs")
	warm := flag.Duration("warmup", 3*time.Second, "how long each run goes before the steady measurement")
	flag.Parse()
	if *pairs < 1 {
		fmt.Fprintln(os.Stderr, "ddtopcost: --pairs must be at least 1")
		os.Exit(2)
	}
	c := cost{n: *n, interval: *interval, warm: *warm, dur: *dur}
	if !*ranks {
		*pairs = 0
	}
	if err := c.run(*ddtop, *base, *pairs, *serve, *rate); err != nil {
		fmt.Fprintln(os.Stderr, "ddtopcost:", err)
		os.Exit(1)
	}
}

// cost is one measurement's settings and the synthetic job's directory.
type cost struct {
	n         int
	interval  time.Duration
	warm, dur time.Duration
	dir       string
}

func (c *cost) run(ddtop, base string, pairs int, serve bool, rate float64) error {
	dir, err := os.MkdirTemp("", "ddtopcost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c.dir = dir
	n := c.n
	job, err := synthetic.New(synthetic.Options{Dir: dir, Job: "cost", Ranks: n, Heartbeat: time.Second})
	if err != nil {
		return err
	}
	defer job.Close()
	load0 := loadAvg()
	stop, stopped := make(chan struct{}), make(chan struct{})
	start, recorded := time.Now(), 0
	go func() { // every 10 ms, the calls due at rate since the start
		defer close(stopped)
		for {
			if due := int(time.Since(start).Seconds() * rate); due > recorded {
				job.Record(due - recorded)
				recorded = due
			}
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	defer func() {
		close(stop)
		<-stopped
		fmt.Printf("synthetic job     %d segments, %.1f calls a second each over %v\n",
			n, float64(recorded)/time.Since(start).Seconds(), time.Since(start).Round(time.Second))
		fmt.Printf("load average      at the start %s, at the end %s\n", load0, loadAvg())
	}()
	time.Sleep(time.Second)

	var mine, theirs, ratios []float64
	bins := [2]string{ddtop, base}
	for i := range pairs {
		roles := []int{0} // 0: --ddtop, 1: --base
		if base != "" {
			roles = []int{i % 2, 1 - i%2}
		}
		var pct [2]float64
		for _, r := range roles {
			if pct[r], err = c.ranksView(bins[r]); err != nil {
				return err
			}
		}
		mine = append(mine, pct[0])
		if base != "" {
			theirs = append(theirs, pct[1])
			if pct[1] > 0 {
				ratios = append(ratios, pct[0]/pct[1])
			}
		}
	}
	if base != "" {
		fmt.Printf("paired            ranks view steady, median of %d: %s %.2f%%, %s %.2f%%; %s ÷ %s median of pair ratios %.3f (pairs: %s)\n",
			len(mine), ddtop, median(mine), base, median(theirs), ddtop, base, median(ratios), list(ratios))
	} else if len(mine) > 1 {
		fmt.Printf("ranks view        steady, median of %d: %.2f%% (runs: %s)\n", len(mine), median(mine), list(mine))
	}
	if serve {
		return c.serve(ddtop)
	}
	return nil
}

// ranksView runs ddtop's ranks view in a pseudo-terminal, reports it and
// returns its steady CPU share of one core, in percent.
func (c *cost) ranksView(ddtop string) (float64, error) {
	cmdline := fmt.Sprintf("stty cols 160 rows 50; exec %s --dir %s --interval %s --nice 0", ddtop, c.dir, c.interval)
	tui := exec.Command("script", "-qfec", cmdline, "/dev/null")
	in, err := tui.StdinPipe()
	if err != nil {
		return 0, err
	}
	tui.Stdout = io.Discard
	tui.Env = append(os.Environ(), "TERM=xterm-256color")
	t0 := time.Now()
	if err := tui.Start(); err != nil {
		return 0, fmt.Errorf("script: %w", err)
	}
	time.Sleep(c.warm)
	pid, err := onlyChild(tui.Process.Pid)
	if err != nil {
		tui.Process.Kill()
		return 0, err
	}
	own0, err0 := procCPU(pid)
	steadyFrom := time.Now()
	time.Sleep(c.dur)
	own1, err1 := procCPU(pid) // ddtop's own, before it quits
	steadyWall := time.Since(steadyFrom)
	io.WriteString(in, "q")
	done := make(chan error, 1)
	go func() { done <- tui.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return 0, fmt.Errorf("%s in script: %w", ddtop, err)
		}
	case <-time.After(10 * time.Second):
		tui.Process.Kill()
		return 0, fmt.Errorf("%s did not quit on q", ddtop)
	}
	wall := time.Since(t0)
	report("ddtop ranks view", c.n, fmt.Sprintf("%s --interval %v", ddtop, c.interval), tui.ProcessState, wall)
	if err := errors.Join(err0, err1); err != nil {
		return 0, err
	}
	return steady("ddtop ranks view", own1-own0, steadyWall), nil
}

// serve runs ddtop serve, scrapes it once a second and reports its CPU.
func (c *cost) serve(ddtop string) error {
	port, err := launch.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	srv := exec.Command(ddtop, "serve", "--dir", c.dir, "--listen", addr, "--nice", "0")
	srv.Stdout, srv.Stderr = io.Discard, os.Stderr
	t0 := time.Now()
	if err := srv.Start(); err != nil {
		return err
	}
	scrapes, size := 0, 0
	var cpu0 time.Duration
	var t1 time.Time
	for t1.IsZero() || time.Since(t1) < c.dur {
		if t1.IsZero() && time.Since(t0) >= c.warm {
			if cpu0, err = procCPU(srv.Process.Pid); err != nil {
				srv.Process.Kill()
				return err
			}
			t1, scrapes = time.Now(), 0
		}
		time.Sleep(time.Second)
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue // still starting
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "ddstore_calls_total") {
			return fmt.Errorf("/metrics has no ddstore_calls_total")
		}
		scrapes++
		size = len(b)
	}
	cpu1, err1 := procCPU(srv.Process.Pid)
	steadyWall := time.Since(t1)
	srv.Process.Signal(syscall.SIGTERM)
	srv.Wait()
	wall := time.Since(t0)
	report("ddtop serve", c.n, fmt.Sprintf("%d KiB a scrape", size>>10), srv.ProcessState, wall)
	if err1 != nil {
		return err1
	}
	steady(fmt.Sprintf("ddtop serve (%d scrapes)", scrapes), cpu1-cpu0, steadyWall)
	return nil
}

// loadAvg is /proc/loadavg's three load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// median of x (0 when empty).
func median(x []float64) float64 {
	s := slices.Sorted(slices.Values(x))
	switch n := len(s); {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	default:
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func list(x []float64) string {
	s := make([]string, len(x))
	for i, v := range x {
		s[i] = strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strings.Join(s, " ")
}

// steady prints a steady-state measurement.
func steady(what string, cpu, wall time.Duration) float64 {
	pct := 100 * cpu.Seconds() / wall.Seconds()
	fmt.Printf("%-17s steady, after the warm-up: ddtop's own CPU %v over %v = %.2f%% of one core\n",
		what, cpu.Round(time.Millisecond), wall.Round(time.Millisecond), pct)
	return pct
}

// onlyChild is the one child of pid (ddtop, exec'd by script's shell).
func onlyChild(pid int) (int, error) {
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(kids))
	if len(f) != 1 {
		return 0, fmt.Errorf("script has %d children (%q), want ddtop alone", len(f), kids)
	}
	return strconv.Atoi(f[0])
}

// procCPU is the user+system CPU time so far of process pid (all its
// threads), from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the ")" that ends the command name: state is 3, utime 14, stime 15.
	rest := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
	if len(rest) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	var ticks int64
	for _, s := range rest[11:13] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux).
const clockTicks = 100

func report(what string, n int, how string, ps *os.ProcessState, wall time.Duration) {
	cpu := ps.UserTime() + ps.SystemTime()
	fmt.Printf("%-17s %d segments, %s, whole run: CPU %v (user %v, sys %v) over %v = %.2f%% of one core\n",
		what, n, how, cpu.Round(time.Millisecond), ps.UserTime().Round(time.Millisecond), ps.SystemTime().Round(time.Millisecond),
		wall.Round(time.Millisecond), 100*cpu.Seconds()/wall.Seconds())
}
