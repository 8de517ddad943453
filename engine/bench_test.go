package engine

// Benchmarks of the read path against side-by-side baselines in one run:
//
//	BenchmarkGet/path=<local|memcpy|tcp|tcp-rma|fabric-tcp|shm|fabric-shm>/row=<bytes>/batch=<1|128>
//	BenchmarkTelemetry/telemetry=<on|off>/row=3072/batch=<1|128>
//
// local is a same-node read out of the peer's mapped shard; memcpy is a
// plain copy of the same rows; tcp and shm read through the engine over
// libfabric (tcp;ofi_rxm on lo, shm); tcp uses the default read mode (auto:
// batches gather, one request per peer), tcp-rma forces one-sided fi_read
// batches (ReadMode "rma"); fabric-tcp and fabric-shm are the
// fabric layer's own batched read of the same rows, without the engine.
// The benchmark process is rank 0 of a 2-rank job; it re-executes the test
// binary as rank 1, whose shard every read targets.

import (
	"flag"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/fabric"
)

func init() { scenarios["benchpeer"] = scenarioBenchPeer }

// benchProgress is the target's progress mode of the benchmark clusters
// (fabric.Options.Progress of rank 1, whose shard every read targets; "":
// the default), for side-by-side runs of one test binary. Rank 0 keeps the
// default: like the C++ peer's reader rank it serves no one, and a
// spinning progress thread there would only compete with its reader. Open
// does not read DDSTORE_FABRIC_PROGRESS (only LoadConfig maps it), so the
// environment cannot set it here.
var benchProgress = flag.String("bench.progress", "", "fabric Progress of the benchmark clusters' target rank (adaptive|sleep|spin)")

// benchSpec is the benchmark variable of one row size (rows per rank).
func benchSpec(rowBytes int64) varSpec {
	base := int64(1024)
	switch {
	case rowBytes == 1: // packed records of 1–16 KB (BenchmarkGetRanges)
		base = 4 << 20
	case rowBytes >= 1<<20:
		base = 64
	case rowBytes >= 128<<10:
		base = 128
	}
	return varSpec{name: fmt.Sprintf("bench-%d", rowBytes), dt: Bytes, rowBytes: rowBytes, base: base, emptyMember: -1}
}

// scenarioBenchPeer is rank 1 of a benchmark: add the variables, then
// wait in Close for rank 0 to finish.
func scenarioBenchPeer(w *worker) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	for _, rb := range parseRows(w.param("ROWS", "")) {
		if err := addPattern(s, benchSpec(rb)); err != nil {
			s.Close()
			return err
		}
	}
	return s.Close()
}

// benchCluster is a 2-rank job: this process (rank 0) and a peer process.
type benchCluster struct {
	s    *Store
	peer *exec.Cmd
	out  *strings.Builder
	job  string
}

func startBenchCluster(b *testing.B, mode string, telemetryOn bool, rows []int64) *benchCluster {
	return startBenchClusterWith(b, mode, telemetryOn, rows, nil)
}

// startBenchClusterWith is startBenchCluster with more scenario parameters
// (both ranks).
func startBenchClusterWith(b *testing.B, mode string, telemetryOn bool, rows []int64, more map[string]string) *benchCluster {
	b.Helper()
	port := freePort(b)
	job := testJob("bench" + mode)
	var rs []string
	for _, r := range rows {
		rs = append(rs, strconv.FormatInt(r, 10))
	}
	params := map[string]string{"MODE": mode, "ROWS": strings.Join(rs, ","), "TIMEOUT": "15m", "TELDIR": b.TempDir()}
	if !telemetryOn {
		params["TELEMETRY"] = "0"
	}
	for k, v := range more {
		params[k] = v
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(cleanEnv(), workerEnv+"=benchpeer", "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1",
		"LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port), "DDSTORE_JOB="+job)
	for k, v := range params {
		cmd.Env = append(cmd.Env, "DDT_"+k+"="+v)
	}
	if *benchProgress != "" { // the target's alone: rank 0 serves no one
		cmd.Env = append(cmd.Env, "DDT_PROGRESS="+*benchProgress)
	}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	o := storeOptions(mode, params)
	o.Bootstrap.Method = "tcp"
	o.Bootstrap.Addr = "127.0.0.1:" + strconv.Itoa(port)
	o.Bootstrap.Token = job
	o.Bootstrap.Env = bootstrap.Env{Rank: 0, World: 2, LocalRank: 0, LocalWorld: 2, Launcher: "bench", Job: job}
	s, err := Open(o)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		b.Fatalf("open rank 0: %v\npeer: %s", err, out)
	}
	c := &benchCluster{s: s, peer: cmd, out: out, job: job}
	for _, rb := range rows {
		if err := addPattern(s, benchSpec(rb)); err != nil {
			c.close(b)
			b.Fatalf("add: %v", err)
		}
	}
	return c
}

func (c *benchCluster) close(b *testing.B) {
	err := c.s.Close()
	done := make(chan error, 1)
	go func() { done <- c.peer.Wait() }()
	select {
	case perr := <-done:
		if perr != nil {
			b.Errorf("bench peer: %v\n%s", perr, c.out)
		}
	case <-time.After(30 * time.Second):
		c.peer.Process.Kill()
		b.Errorf("bench peer did not exit\n%s", c.out)
	}
	if err != nil {
		b.Errorf("close rank 0: %v", err)
	}
	checkNoShardFiles(b, c.job)
}

// peerIdx are batch random rows of rank 1's shard of spec.
func peerIdx(c *benchCluster, spec varSpec, batch int) []int64 {
	info, _ := c.s.Query(spec.name)
	lo, n := info.Shards[1], info.Shards[2]-info.Shards[1]
	rng := rand.New(rand.NewSource(int64(batch)))
	idx := make([]int64, batch)
	for i := range idx {
		idx[i] = lo + rng.Int63n(n)
	}
	return idx
}

// runRead times read() that fetches batch rows of rowBytes per call, and
// checks the rows of the last call.
func runRead(b *testing.B, rowBytes int64, batch int, read func() error, check func() error) {
	b.SetBytes(rowBytes * int64(batch))
	b.ReportAllocs()
	if err := read(); err != nil { // warm up (connections, pins)
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := read(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N)/float64(batch), "us/row")
	if err := check(); err != nil {
		b.Fatal(err)
	}
}

var benchRows = []int64{3072, 12800, 204800, 1048576}

func BenchmarkGet(b *testing.B) {
	clusters := map[string]*benchCluster{}
	cluster := func(b *testing.B, mode string) *benchCluster {
		if c := clusters[mode]; c != nil {
			return c
		}
		c := startBenchCluster(b, mode, true, benchRows)
		clusters[mode] = c
		return c
	}
	defer func() {
		for _, c := range clusters {
			c.close(b)
		}
	}()
	for _, path := range []string{"local", "memcpy", "tcp", "tcp-rma", "fabric-tcp", "shm", "fabric-shm"} {
		mode := strings.TrimPrefix(path, "fabric-")
		if path == "memcpy" {
			mode = "local"
		}
		b.Run("path="+path, func(b *testing.B) {
			c := cluster(b, mode)
			for _, rb := range benchRows {
				spec := benchSpec(rb)
				v, err := c.s.Var(spec.name)
				if err != nil {
					b.Fatal(err)
				}
				salt := spec.salt(0)
				for _, batch := range []int{1, 128} {
					idx := peerIdx(c, spec, batch)
					dst := make([]byte, int64(batch)*rb)
					check := func() error { return checkRows(dst, rb, salt, idx) }
					var read func() error
					switch path {
					case "local", "tcp", "tcp-rma", "shm":
						r, err := c.s.NewReader()
						if err != nil {
							b.Fatal(err)
						}
						defer r.Close()
						if batch == 1 {
							read = func() error { return r.Get(spec.name, idx[0], 1, dst) }
						} else {
							read = func() error { return r.GetBatch(spec.name, idx, dst) }
						}
					case "memcpy":
						src := v.src[v.lay.Home[1]]
						lo := v.lay.Offsets[1]
						read = func() error {
							for i, g := range idx {
								copy(dst[int64(i)*rb:int64(i+1)*rb], src[(g-lo)*rb:(g-lo+1)*rb])
							}
							return nil
						}
					default: // fabric-tcp, fabric-shm: the fabric layer alone
						read = fabricBatch(b, c, v, idx, dst)
					}
					b.Run(fmt.Sprintf("row=%d/batch=%d", rb, batch), func(b *testing.B) {
						runRead(b, rb, batch, read, check)
					})
				}
			}
		})
	}
}

// fabricBatch is a read of idx straight through a fabric.Reader.
func fabricBatch(b *testing.B, c *benchCluster, v *Var, idx []int64, dst []byte) func() error {
	if c.s.fab == nil {
		b.Fatal("no fabric")
	}
	fr, err := c.s.fab.NewReader()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fr.Close() })
	peer, err := fr.AddPeer(1, c.s.peers[1].Addr)
	if err != nil {
		b.Fatal(err)
	}
	rb, lo, rs := v.rowBytes, v.lay.Offsets[1], v.remote[v.lay.Home[1]]
	ops := make([]fabric.ReadOp, len(idx))
	for i, g := range idx {
		ops[i] = fabric.ReadOp{Dst: dst[int64(i)*rb : int64(i+1)*rb], Peer: peer, Addr: rs.base + uint64((g-lo)*rb), Key: rs.key}
	}
	return func() error {
		_, err := fr.ReadBatch(ops)
		return err
	}
}

// BenchmarkTelemetry compares reads with and without telemetry on the same
// shards, in one process: "off" takes the variable out of telemetry, which
// is the code path of a store opened with telemetry off (DDSTORE_TELEMETRY=0).
// With -count=N the on and off runs alternate, N pairs.
func BenchmarkTelemetry(b *testing.B) {
	tb := startTelemetryBench(b)
	defer tb.close(b)
	for _, on := range []bool{true, false} {
		name := "telemetry=off"
		if on {
			name = "telemetry=on"
		}
		tb.telemetry(on)
		b.Run(name, func(b *testing.B) {
			for _, batch := range []int{1, 128} {
				idx, dst, read := tb.read(batch)
				b.Run(fmt.Sprintf("row=%d/batch=%d", telBenchRow, batch), func(b *testing.B) {
					runRead(b, telBenchRow, batch, read, func() error { return checkRows(dst, telBenchRow, tb.spec.salt(0), idx) })
				})
			}
		})
	}
}

// telBenchRow is the row size of the telemetry benchmarks.
const telBenchRow = 3072

// telemetryBench is the setting of the telemetry benchmarks: a one-process
// cluster of one variable of telBenchRow-byte rows, and a Reader.
type telemetryBench struct {
	c     *benchCluster
	spec  varSpec
	v     *Var
	telID int32
	r     *Reader
}

func startTelemetryBench(b *testing.B) *telemetryBench {
	tb := &telemetryBench{c: startBenchCluster(b, "local", true, []int64{telBenchRow}), spec: benchSpec(telBenchRow)}
	var err error
	if tb.v, err = tb.c.s.Var(tb.spec.name); err != nil {
		tb.c.close(b)
		b.Fatal(err)
	}
	tb.telID = tb.v.telID
	if tb.r, err = tb.c.s.NewReader(); err != nil {
		tb.c.close(b)
		b.Fatal(err)
	}
	return tb
}

// telemetry takes the variable out of telemetry (off: the code path of a
// store opened with telemetry off) or puts it back.
func (tb *telemetryBench) telemetry(on bool) {
	tb.v.telID = -1
	if on {
		tb.v.telID = tb.telID
	}
}

// read is a read of batch rows of a peer (Get for one, GetBatch for more)
// into dst, and the rows it reads.
func (tb *telemetryBench) read(batch int) (idx []int64, dst []byte, read func() error) {
	idx = peerIdx(tb.c, tb.spec, batch)
	dst = make([]byte, int64(batch)*telBenchRow)
	read = func() error { return tb.r.GetBatch(tb.spec.name, idx, dst) }
	if batch == 1 {
		read = func() error { return tb.r.Get(tb.spec.name, idx[0], 1, dst) }
	}
	return idx, dst, read
}

func (tb *telemetryBench) close(b *testing.B) {
	tb.telemetry(true)
	tb.r.Close()
	tb.c.close(b)
}
