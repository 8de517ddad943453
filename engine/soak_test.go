package engine

import (
	"fmt"
	"math/rand"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// The soak (make soak with 10 M rows per path; make test with 1 M): 4
// ranks read random batches of a pattern variable over every path (the
// same-node mapping, tcp one-sided reads, shm, tcp gather) until
// DDSTORE_SOAK_ROWS rows per path are read, every row checked against the
// pattern of its global index. Batches mix the Store's shared path, a
// Reader, and Get of contiguous runs; sizes are random from 1 to 512 rows,
// indices random over all shards (with duplicates), rows 96 bytes.
//
// Then the failover soak: 4 ranks in 2 replica groups (width 2) over tcp
// one-sided reads; rank 1, owner of shard 1 in group 0, is killed
// (SIGKILL) a quarter into its run, while rank 0 reads shard 1 too: its
// reads move to rank 3, the replica, inside the calls. The survivors read
// DDSTORE_SOAK_ROWS rows between them with no mismatch, and the rows that
// failed over are counted and printed.

func init() { scenarios["soak"] = scenarioSoak }

var soakLine = regexp.MustCompile(`SOAK rows=(\d+) calls=(\d+) ns=(\d+) failovers=(\d+)`)

// soakVictim is the rank the failover soak kills: member 1 of group 0.
const soakVictim = 1

func TestSoak(t *testing.T) {
	total, err := strconv.ParseInt(os.Getenv("DDSTORE_SOAK_ROWS"), 10, 64)
	if err != nil || total <= 0 {
		t.Skip("set DDSTORE_SOAK_ROWS (rows per path; make soak uses 10000000, make test 1000000)")
	}
	const world = 4
	var all int64
	start := time.Now()
	for _, path := range []string{"local", "tcp-rma", "shm", "tcp-gather", "failover"} {
		t0 := time.Now()
		params := map[string]string{"MODE": path, "SOAK_ROWS": strconv.FormatInt((total+world-1)/world, 10), "TIMEOUT": "10m"}
		var allow func(r rankResult) bool
		survivors := int64(world)
		if path == "failover" {
			survivors--
			params = map[string]string{"MODE": "tcp-rma", "WIDTH": "2", "SOAK_KILL": strconv.Itoa(soakVictim),
				"SOAK_ROWS": strconv.FormatInt((total+survivors-1)/survivors, 10), "TIMEOUT": "10m", "FTIMEOUT": "10s"}
			allow = func(r rankResult) bool { return r.rank == soakVictim && killedBySignal(r.err, syscall.SIGKILL) }
		}
		res := spawnRanks(t, world, "soak", params, 20*time.Minute, allow)
		var rows, calls, failovers int64
		for _, r := range res {
			m := soakLine.FindStringSubmatch(r.output)
			if m == nil {
				t.Fatalf("path %s rank %d printed no SOAK line:\n%s", path, r.rank, r.output)
			}
			n, _ := strconv.ParseInt(m[1], 10, 64)
			c, _ := strconv.ParseInt(m[2], 10, 64)
			f, _ := strconv.ParseInt(m[4], 10, 64)
			if path == "failover" && r.rank == soakVictim {
				if !killedBySignal(r.err, syscall.SIGKILL) {
					t.Fatalf("rank %d was not killed: %v\n%s", r.rank, r.err, r.output)
				}
				fmt.Printf("soak path=failover   rank %d killed after %d rows checked\n", r.rank, n)
				continue // its rows were checked, but the total is the survivors'
			}
			rows, calls, failovers = rows+n, calls+c, failovers+f
		}
		if rows < total {
			t.Fatalf("path %s: %d rows checked, want at least %d", path, rows, total)
		}
		el := time.Since(t0)
		all += rows
		fmt.Printf("soak path=%-10s %d ranks: %d rows checked in %d calls, %.1f s (%.2f M rows/s, start and Add included)\n",
			path, survivors, rows, calls, el.Seconds(), float64(rows)/el.Seconds()/1e6)
		if path == "failover" {
			if failovers == 0 {
				t.Fatalf("failover: rank %d killed but no row failed over", soakVictim)
			}
			fmt.Printf("soak path=failover   %d of %d rows failed over to a replica after rank %d was killed, 0 mismatches\n",
				failovers, rows, soakVictim)
		}
	}
	fmt.Printf("soak total: %d rows checked over 5 paths in %.1f s, 0 mismatches\n", all, time.Since(start).Seconds())
}

func scenarioSoak(w *worker) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	defer s.Close()
	want := int64(w.intParam("SOAK_ROWS", 100000))
	victim := w.intParam("SOAK_KILL", -1)
	spec := varSpec{name: "soak", dt: Bytes, rowBytes: 96, base: 40000, emptyMember: -1}
	// Replica groups hold the same rows (salt of group 0); otherwise each
	// group its own.
	salt := spec.salt(s.Group())
	if victim >= 0 {
		salt = spec.salt(0)
	}
	if err := addSalted(s, spec, salt); err != nil {
		return err
	}
	info, err := s.Query(spec.name)
	if err != nil {
		return err
	}
	global := info.GlobalRows
	r, err := s.NewReader()
	if err != nil {
		return err
	}
	defer r.Close()
	// more says whether to read on after rows rows. Without a victim:
	// until want. The victim dies a quarter into its run; the other ranks
	// of its group read on past want until they have seen its death and
	// failed over, so that the kill always lands mid-run for them.
	more := func(rows int64) bool { return rows < want }
	var deadline time.Time
	switch {
	case s.Rank() == victim:
		more = func(rows int64) bool {
			if rows >= want/4 {
				fmt.Printf("SOAK rows=%d calls=0 ns=0 failovers=0\n", rows)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				time.Sleep(time.Minute)
			}
			return true
		}
	case victim >= 0 && s.Group() == victim/s.Width():
		more = func(rows int64) bool {
			if rows < want {
				return true
			}
			if s.PeerDead(victim) && s.Failovers().From[victim] > 0 {
				return false
			}
			if deadline.IsZero() {
				deadline = time.Now().Add(2 * time.Minute)
			}
			return time.Now().Before(deadline)
		}
	}
	const maxBatch = 512
	rng := rand.New(rand.NewSource(int64(s.Rank())*7919 + 1))
	idx := make([]int64, maxBatch)
	dst := make([]byte, maxBatch*spec.rowBytes)
	var rows, calls int64
	t0 := time.Now()
	for more(rows) {
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
	var failovers int64
	if victim >= 0 {
		failovers = s.Failovers().From[victim]
		if s.Group() == victim/s.Width() && failovers == 0 {
			return fmt.Errorf("rank %d's death not seen, or no read failed over, within 2 minutes past the run", victim)
		}
	}
	fmt.Printf("SOAK rows=%d calls=%d ns=%d failovers=%d\n", rows, calls, time.Since(t0).Nanoseconds(), failovers)
	if victim >= 0 {
		// The survivors stay until all have read (rank 0's failovers
		// need rank 3); the store's own collectives wait for the victim.
		var live []int
		for q := 0; q < s.World(); q++ {
			if q != victim {
				live = append(live, q)
			}
		}
		if err := filesMeet(w.param("TELDIR", os.TempDir()), "soak-end", s.Rank(), live, 10*time.Minute); err != nil {
			return err
		}
		t1 := time.Now()
		err := s.Close()
		w.logf("Close with rank %d dead took %v: %v", victim, time.Since(t1).Round(time.Millisecond), err)
	}
	return nil
}
