package engine

import (
	"fmt"
	"math/rand"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// The soak (make soak; not part of make test): 4 ranks read random
// batches of a pattern variable over every path (the same-node mapping,
// tcp one-sided reads, shm, tcp gather) until DDSTORE_SOAK_ROWS rows per
// path are read, every row checked against the pattern of its global
// index. Batches mix the Store's shared path, a Reader, and Get of
// contiguous runs; sizes are random from 1 to 512 rows, indices random
// over all four shards (with duplicates), rows 96 bytes.

func init() { scenarios["soak"] = scenarioSoak }

var soakLine = regexp.MustCompile(`SOAK rows=(\d+) calls=(\d+) ns=(\d+)`)

func TestSoak(t *testing.T) {
	total, err := strconv.ParseInt(os.Getenv("DDSTORE_SOAK_ROWS"), 10, 64)
	if err != nil || total <= 0 {
		t.Skip("set DDSTORE_SOAK_ROWS (rows per path; make soak uses 10000000)")
	}
	const world = 4
	var all int64
	start := time.Now()
	for _, path := range []string{"local", "tcp-rma", "shm", "tcp-gather"} {
		t0 := time.Now()
		res := spawnRanks(t, world, "soak", map[string]string{"MODE": path,
			"SOAK_ROWS": strconv.FormatInt((total+world-1)/world, 10), "TIMEOUT": "10m"}, 20*time.Minute, nil)
		var rows, calls int64
		for _, r := range res {
			m := soakLine.FindStringSubmatch(r.output)
			if m == nil {
				t.Fatalf("path %s rank %d printed no SOAK line:\n%s", path, r.rank, r.output)
			}
			n, _ := strconv.ParseInt(m[1], 10, 64)
			c, _ := strconv.ParseInt(m[2], 10, 64)
			rows, calls = rows+n, calls+c
		}
		if rows < total {
			t.Fatalf("path %s: %d rows checked, want at least %d", path, rows, total)
		}
		el := time.Since(t0)
		all += rows
		fmt.Printf("soak path=%-10s %d ranks: %d rows checked in %d calls, %.1f s (%.2f M rows/s, start and Add included)\n",
			path, world, rows, calls, el.Seconds(), float64(rows)/el.Seconds()/1e6)
	}
	fmt.Printf("soak total: %d rows checked over 4 paths in %.1f s\n", all, time.Since(start).Seconds())
}

func scenarioSoak(w *worker) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	defer s.Close()
	want := int64(w.intParam("SOAK_ROWS", 100000))
	spec := varSpec{name: "soak", dt: Bytes, rowBytes: 96, base: 40000, emptyMember: -1}
	if err := addPattern(s, spec); err != nil {
		return err
	}
	info, err := s.Query(spec.name)
	if err != nil {
		return err
	}
	global := info.GlobalRows
	salt := spec.salt(s.Group())
	r, err := s.NewReader()
	if err != nil {
		return err
	}
	defer r.Close()
	const maxBatch = 512
	rng := rand.New(rand.NewSource(int64(s.Rank())*7919 + 1))
	idx := make([]int64, maxBatch)
	dst := make([]byte, maxBatch*spec.rowBytes)
	var rows, calls int64
	t0 := time.Now()
	for rows < want {
		n := 1 + rng.Intn(maxBatch)
		var g getter = r
		if rng.Intn(4) == 0 {
			g = s
		}
		d := dst[:int64(n)*spec.rowBytes]
		if rng.Intn(8) == 0 { // a contiguous run, across shard boundaries
			start := rng.Int63n(global - int64(n) + 1)
			for i := range idx[:n] {
				idx[i] = start + int64(i)
			}
			if err := g.Get(spec.name, start, int64(n), d); err != nil {
				return fmt.Errorf("Get [%d,%d) after %d rows: %w", start, start+int64(n), rows, err)
			}
		} else {
			for i := range idx[:n] {
				idx[i] = rng.Int63n(global)
			}
			if err := g.GetBatch(spec.name, idx[:n], d); err != nil {
				return fmt.Errorf("GetBatch of %d rows after %d rows: %w", n, rows, err)
			}
		}
		if err := checkRows(d, spec.rowBytes, salt, idx[:n]); err != nil {
			return fmt.Errorf("after %d rows: %w", rows, err)
		}
		rows += int64(n)
		calls++
	}
	fmt.Printf("SOAK rows=%d calls=%d ns=%d\n", rows, calls, time.Since(t0).Nanoseconds())
	return nil
}
