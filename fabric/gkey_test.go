package fabric

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ddstore/ddstore/internal/testkit"
)

// A stranger is a separate process that knows a live target's fabric
// address, memory key and base (all it needs on tcp) but not the job's
// gather key; it sends gather requests and says, per call, what came back.

const envStranger = "DDSTORE_FABRIC_TEST_STRANGER" // "addr-hex|key|base|gkey|calls|timeout-ms"

const strangerRow = 3072

// runStranger is the stranger process: calls ReadGathers of one row each
// (one request each) from the target, with gather key gkey (TryGather),
// printing one line per call (GatherTry.String).
func runStranger(spec string) int {
	p := strings.Split(spec, "|")
	if len(p) != 6 {
		fmt.Fprintf(os.Stderr, "bad stranger spec %q\n", spec)
		return 2
	}
	addr, _ := hex.DecodeString(p[0])
	key, _ := strconv.ParseUint(p[1], 10, 64)
	base, _ := strconv.ParseUint(p[2], 10, 64)
	gkey, _ := strconv.ParseUint(p[3], 10, 64)
	calls, _ := strconv.Atoi(p[4])
	ms, _ := strconv.Atoi(p[5])
	o := provCases[0].opts
	o.GatherKey = gkey
	o.Timeout = time.Duration(ms) * time.Millisecond
	return StrangerMain(o, addr, key, base, strangerRow, calls)
}

// strangerCall is one call of a stranger process, as it printed it.
type strangerCall struct {
	ok, timeout, zero bool
	pattern, err      string
}

// startStranger runs a stranger process against the target (addr, key,
// base) with gather key gkey; wait returns its calls, or kills the process
// and fails the test when it has not exited within a generous deadline
// (its calls' timeouts, plus a start and Open on a loaded machine).
func startStranger(t *testing.T, addr []byte, key, base, gkey uint64, calls int, timeout time.Duration) (wait func() []strangerCall) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%x|%d|%d|%d|%d|%d", envStranger, addr, key, base, gkey, calls, timeout.Milliseconds()))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	limit := 30*time.Second*testkit.RaceScale + time.Duration(calls)*timeout
	type result struct {
		got  []strangerCall
		bad  []string // lines that are no GatherTry
		exit error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			g, err := ParseGatherTry(sc.Text())
			if err != nil {
				res.bad = append(res.bad, fmt.Sprintf("%q: %v", sc.Text(), err))
				continue
			}
			res.got = append(res.got, strangerCall{ok: g.OK, timeout: g.TimedOut, zero: g.Untouched, pattern: g.Pattern, err: g.Err})
		}
		res.exit = cmd.Wait()
		done <- res
	}()
	return func() []strangerCall {
		t.Helper()
		var res result
		select {
		case res = <-done:
		case <-time.After(limit):
			cmd.Process.Kill()
			res = <-done
			t.Fatalf("stranger process (gather key %#x) still running after %v: killed, %d of %d calls reported", gkey, limit, len(res.got), calls)
		}
		for _, b := range res.bad {
			t.Errorf("stranger printed %s", b)
		}
		if res.exit != nil {
			t.Errorf("stranger process (gather key %#x): %v", gkey, res.exit)
		}
		return res.got
	}
}

// TestGatherStrangers: a live tcp target with the job's gather key, read
// by the job's reader while separate processes that know its address,
// memory key and base send gather requests: those with another key (one
// bit off) or none get no data (every call times out, its destination
// untouched) and are counted exactly, one per request, in GatherStrangers;
// one with the job's key, from the same kind of process, gets every row;
// the job's reader gets every row throughout, checked against the pattern.
func TestGatherStrangers(t *testing.T) {
	const job = 0x6a6f622d6b6579 // the job's gather key
	o := provCases[0].opts
	o.GatherKey = job
	o.Timeout = 5 * time.Second * testkit.RaceScale
	f := openOrSkip(t, o)
	needSoftRMA(t, f)
	const size = 1 << 20
	mem, err := Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Free()
	fillPattern(mem.Bytes())
	ex, err := f.Export(mem.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	r, err := f.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	peer, err := r.AddPeer(1, f.Address())
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{addr: f.Address(), key: ex.Key(), base: ex.Base(), size: size}

	before := GatherStrangers()
	const calls = 3
	stTimeout := time.Second * testkit.RaceScale
	strangers := map[string]uint64{"one bit off": job ^ 1<<17, "no key": 0}
	waits := map[string]func() []strangerCall{}
	for name, k := range strangers {
		waits[name] = startStranger(t, tg.addr, tg.key, tg.base, k, calls, stTimeout)
	}
	// The job's reader, while the strangers ask: 128 rows of 3 KB a batch.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var batches int
	var jobErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 128*strangerRow)
		for i := 0; ; i++ {
			select {
			case <-stop:
				if batches >= 5 {
					return
				}
			default:
			}
			ops := make([]ReadOp, 128)
			for k := range ops {
				idx := (i*131 + k*37) % (size / strangerRow)
				ops[k] = ReadOp{Dst: buf[k*strangerRow : (k+1)*strangerRow], Peer: peer, Addr: tg.base + uint64(idx*strangerRow), Key: tg.key}
			}
			clear(buf)
			if _, err := r.ReadGather(ops); err != nil {
				jobErr = fmt.Errorf("batch %d: %w", i, err)
				return
			}
			for k, op := range ops {
				if err := checkPattern(op.Dst, op.Addr-tg.base); err != nil {
					jobErr = fmt.Errorf("batch %d row %d: %w", i, k, err)
					return
				}
			}
			batches++
		}
	}()
	for name, wait := range waits {
		got := wait()
		if len(got) != calls {
			t.Errorf("%s: %d calls reported, want %d", name, len(got), calls)
		}
		for i, c := range got {
			if c.ok || !c.zero || !c.timeout {
				t.Errorf("%s: call %d: ok %v, timed out %v, destination untouched %v (%s): want no data, a timeout", name, i, c.ok, c.timeout, c.zero, c.err)
			}
		}
	}
	close(stop)
	wg.Wait()
	if jobErr != nil {
		t.Fatalf("the job's reader: %v", jobErr)
	}
	want := uint64(len(strangers) * calls)
	deadline := time.Now().Add(10 * time.Second * testkit.RaceScale)
	for GatherStrangers()-before < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := GatherStrangers() - before; got != want {
		t.Fatalf("GatherStrangers counted %d requests, want %d (%d strangers × %d calls)", got, want, len(strangers), calls)
	}

	// The same kind of process with the job's key gets its rows, and is
	// no stranger.
	own := startStranger(t, tg.addr, tg.key, tg.base, job, calls, 5*time.Second*testkit.RaceScale)()
	if len(own) != calls {
		t.Errorf("with the job's key: %d calls reported, want %d", len(own), calls)
	}
	for i, c := range own {
		if !c.ok || c.pattern != "good" {
			t.Errorf("with the job's key: call %d: ok %v, pattern %s (%s)", i, c.ok, c.pattern, c.err)
		}
	}
	if got := GatherStrangers() - before; got != want {
		t.Fatalf("GatherStrangers %d after the job's own process read, want still %d", got, want)
	}
	t.Logf("%d job batches of 128×3 KB read and checked while %d strangers sent %d requests", batches, len(strangers), want)
}

// A stranger's line round-trips, error text with spaces and quotes
// included, and a line of something else is an error.
func TestGatherTryLine(t *testing.T) {
	for _, g := range []GatherTry{
		{TimedOut: true, Untouched: true, Pattern: "-", Err: `fabric: read "x": timed out`},
		{OK: true, Untouched: false, Pattern: "good"},
	} {
		back, err := ParseGatherTry(g.String())
		if err != nil || back != g {
			t.Errorf("%q: parsed %+v, %v", g.String(), back, err)
		}
	}
	for _, bad := range []string{"", "CALL true", "TRY true false", "TRY x false true - \"\""} {
		if _, err := ParseGatherTry(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
