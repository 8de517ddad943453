package doctor

// The read probe: this binary re-executed as a target process (TargetArg)
// that exports a region through fabric.ServeTarget, and this process
// reading it: one read at a time (latency), batches of 1024 rows with 128
// in flight (throughput, as fabric's BenchmarkRead), gather batches on
// software-RMA providers, 1 MiB rows (bandwidth), and the cost of
// registering memory. Destinations are 128 slots reused (fewer for rows
// over 512 KiB: 64 MiB in all), as in the benchmark, so that the figures
// compare: the rows still in their slots after each timed loop (all of
// them when there are no more rows than slots, else the last ones) are
// checked against the pattern, and counted (Reads.Rows).

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/ddstore/ddstore/fabric"
)

// TargetArg is the first argument that makes a doctor binary a read
// target: TargetArg provider domain bytes. A main that runs Run must call
// ServeTargetArgs first (cmd/doctor does).
const TargetArg = "__ddstore_doctor_target"

// ServeTargetArgs serves as a read target when args (os.Args) say so,
// and reports whether they did; the process should then exit with the
// returned code.
func ServeTargetArgs(args []string) (bool, int) {
	if len(args) != 5 || args[1] != TargetArg {
		return false, 0
	}
	size, err := strconv.Atoi(args[4])
	if err != nil || size <= 0 {
		fmt.Fprintf(os.Stderr, "doctor target: bad size %q\n", args[4])
		return true, 2
	}
	if err := fabric.ServeTarget(fabric.Options{Provider: args[2], Domain: args[3]}, size, false, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "doctor target:", err)
		return true, 1
	}
	return true, 0
}

// Reads is what the read probe measured on one provider and domain.
type Reads struct {
	Provider string `json:"provider"`
	Domain   string `json:"domain"`
	RowBytes int    `json:"row_bytes"`
	// LatencyUs: one read at a time, µs per read.
	LatencyUs float64 `json:"latency_us"`
	// BatchUsPerRow and BatchGBps: batches of 1024 rows, Window in flight.
	Window        int     `json:"window"`
	BatchUsPerRow float64 `json:"batch_us_per_row"`
	BatchGBps     float64 `json:"batch_gbps"`
	// GatherUsPerRow: the same batches as one gather request per round
	// (software-RMA providers only; 0 elsewhere).
	GatherUsPerRow float64 `json:"gather_us_per_row,omitempty"`
	// BigRowGBps: batches of 16 rows of 1 MiB.
	BigRowGBps float64 `json:"big_row_gbps"`
	// MRUsPerMiB: registering (Export) 64 MiB of memory, µs per MiB.
	MRUsPerMiB float64 `json:"mr_us_per_mib"`
	// Rows: the rows checked against the pattern (not every row read: see
	// the probe's slots above).
	Rows  int64  `json:"rows_checked"`
	Error string `json:"error,omitempty"`
}

const (
	targetBytes = 256 << 20 // as fabric's benchmarks
	batchRows   = 1024
	bigRow      = 1 << 20
	bigRows     = 16 // 1 MiB rows per batch
	mrBytes     = 64 << 20
)

// target is a started target process.
// target is a target process (fabric.StartTarget).
type target struct{ *fabric.TargetProcess }

func startTarget(ctx context.Context, exe, provider, domain string) (*target, error) {
	cmd := exec.CommandContext(ctx, exe, TargetArg, provider, domain, strconv.Itoa(targetBytes))
	cmd.Stderr = os.Stderr
	tp, err := fabric.StartTarget(ctx, cmd)
	if err != nil {
		return nil, err
	}
	return &target{tp}, nil
}

// stop closes the target's input and waits for it, killing it after 5s
// (and removing what a killed shm endpoint leaves in /dev/shm).
func (tg *target) stop() { tg.Stop() }

// probeReads measures reads from a target process on provider/domain,
// spending about per on each measurement (count > 0: count rows for the
// single reads and the 128-in-flight batches).
func probeReads(ctx context.Context, exe, provider, domain string, per time.Duration, count int, progress io.Writer) (res Reads, err error) {
	res = Reads{Provider: provider, Domain: domain, RowBytes: 3072}
	t0 := time.Now()
	phase := func(what string) {
		if progress != nil && err == nil {
			fmt.Fprintf(progress, "doctor:   %s: %s (%.2fs)\n", provider, what, time.Since(t0).Seconds())
		}
	}
	tg, err := startTarget(ctx, exe, provider, domain)
	if err != nil {
		return res, err
	}
	phase("target ready")
	defer tg.stop()
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(dl), time.Second)
	}
	f, err := fabric.Open(fabric.Options{Provider: provider, Domain: domain, Window: fabric.DefaultWindow, Timeout: timeout})
	if err != nil {
		return res, err
	}
	defer f.Close()
	res.Domain, res.Window = f.Info().Domain, f.Info().Window
	r, err := f.NewReader()
	if err != nil {
		return res, err
	}
	defer r.Close()
	peer, err := r.AddPeer(1, tg.Addr)
	if err != nil {
		return res, err
	}
	mem, err := fabric.Alloc(64 << 20)
	if err != nil {
		return res, err
	}
	defer mem.Free()
	m := meter{r: r, peer: peer, tg: tg.TargetInfo, dst: mem.Bytes(), rng: rand.New(rand.NewSource(1)), ctx: ctx}
	// Connect and warm up (the target connects back on its first gather).
	if _, err := m.batches(4096, 256, 1, 0, false); err != nil {
		return res, err
	}
	if f.Info().SoftwareRMA {
		if _, err := m.batches(4096, 256, 1, 0, true); err != nil {
			return res, err
		}
	}
	phase("connected")
	var us float64
	if count > 0 {
		if res.LatencyUs, err = m.counted(res.RowBytes, count, 1); err != nil {
			return res, err
		}
		phase(fmt.Sprintf("%d single reads %.1f µs", count, res.LatencyUs))
		us, err = m.counted(res.RowBytes, count, batchRows)
	} else {
		if res.LatencyUs, err = m.singles(res.RowBytes, per); err != nil {
			return res, err
		}
		phase(fmt.Sprintf("single reads %.1f µs", res.LatencyUs))
		us, err = m.batches(res.RowBytes, batchRows, 0, per, false)
	}
	if err != nil {
		return res, err
	}
	res.BatchUsPerRow, res.BatchGBps = us, float64(res.RowBytes)/us/1e3
	phase(fmt.Sprintf("batches %.2f µs/row", us))
	if f.Info().SoftwareRMA {
		if res.GatherUsPerRow, err = m.batches(res.RowBytes, batchRows, 0, per, true); err != nil {
			return res, err
		}
		phase(fmt.Sprintf("gather %.2f µs/row", res.GatherUsPerRow))
	}
	us, err = m.batches(bigRow, bigRows, 0, per/2, false)
	if err != nil {
		return res, err
	}
	res.BigRowGBps = float64(bigRow) / us / 1e3
	phase(fmt.Sprintf("1 MiB rows %.2f GB/s", res.BigRowGBps))
	res.Rows = m.checked
	res.MRUsPerMiB, err = mrCost(f, mem.Bytes()[:mrBytes])
	return res, err
}

// meter reads rows of the target at random row offsets into dst slots.
type meter struct {
	r       *fabric.Reader
	peer    fabric.Peer
	tg      fabric.TargetInfo
	dst     []byte
	rng     *rand.Rand
	ctx     context.Context
	checked int64
	ops     []fabric.ReadOp
}

// fill prepares n ops of row bytes at random row offsets.
func (m *meter) fill(row, n int) []fabric.ReadOp {
	slots := min(128, len(m.dst)/row)
	nrows := m.tg.Size / row
	m.ops = m.ops[:0]
	for i := 0; i < n; i++ {
		s := i % slots
		m.ops = append(m.ops, fabric.ReadOp{Dst: m.dst[s*row : (s+1)*row], Peer: m.peer,
			Addr: m.tg.Base + uint64(m.rng.Intn(nrows)*row), Key: m.tg.Key})
	}
	return m.ops
}

// check verifies the last slots' rows of ops (those still in dst).
func (m *meter) check(ops []fabric.ReadOp) error {
	slots := min(128, len(m.dst)/len(ops[0].Dst))
	for _, op := range ops[max(0, len(ops)-slots):] {
		if err := fabric.CheckPattern(op.Dst, op.Addr-m.tg.Base); err != nil {
			return fmt.Errorf("row read back wrong: %v", err)
		}
		m.checked++
	}
	return nil
}

// singles reads one row at a time for about d (at least 128 reads): µs
// per read.
func (m *meter) singles(row int, d time.Duration) (float64, error) {
	var el time.Duration
	n := 0
	for n < 128 || el < d {
		if err := m.ctx.Err(); err != nil {
			return 0, err
		}
		ops := m.fill(row, 128)
		t0 := time.Now()
		for i := range ops {
			if _, err := m.r.Read(ops[i]); err != nil {
				return 0, err
			}
		}
		el += time.Since(t0)
		n += len(ops)
		if err := m.check(ops); err != nil {
			return 0, err
		}
	}
	return float64(el.Microseconds()) / float64(n), nil
}

// counted reads n rows of row bytes, one at a time (batch 1: Read) or in
// batches of batch rows (ReadBatch, the window in flight), as fabric's
// BenchmarkRead does for -test.benchtime=nx: the offsets are drawn before
// and the rows checked after the one timed loop, so the loop is nothing
// but the reads. µs per row.
func (m *meter) counted(row, n, batch int) (float64, error) {
	ops := m.fill(row, n)
	t0 := time.Now()
	for done := 0; done < n; {
		k := min(n-done, batch)
		var err error
		if k == 1 {
			_, err = m.r.Read(ops[done])
		} else {
			_, err = m.r.ReadBatch(ops[done : done+k])
		}
		if err != nil {
			return 0, err
		}
		done += k
	}
	el := time.Since(t0)
	if err := m.check(ops); err != nil {
		return 0, err
	}
	return float64(el.Nanoseconds()) / 1e3 / float64(n), nil
}

// batches reads batches of n rows (ReadBatch, or ReadGather) for about d
// and at least minBatches: µs per row.
func (m *meter) batches(row, n, minBatches int, d time.Duration, gather bool) (float64, error) {
	var el time.Duration
	rows, b := 0, 0
	for b < minBatches || el < d || b == 0 {
		if err := m.ctx.Err(); err != nil {
			return 0, err
		}
		ops := m.fill(row, n)
		t0 := time.Now()
		var err error
		if gather {
			_, err = m.r.ReadGather(ops)
		} else {
			_, err = m.r.ReadBatch(ops)
		}
		el += time.Since(t0)
		if err != nil {
			return 0, err
		}
		rows += n
		b++
		if err := m.check(ops); err != nil {
			return 0, err
		}
	}
	return float64(el.Nanoseconds()) / 1e3 / float64(rows), nil
}

// mrCost registers b for remote reads three times: the median µs per MiB.
func mrCost(f *fabric.Fabric, b []byte) (float64, error) {
	var ts []float64
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		ex, err := f.Export(b)
		if err != nil {
			return 0, err
		}
		el := time.Since(t0)
		if err := ex.Close(); err != nil {
			return 0, err
		}
		ts = append(ts, float64(el.Nanoseconds())/1e3/float64(len(b)>>20))
	}
	return median(ts), nil
}
