package engine

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ddstore/ddstore/engine/bootstrap"
	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
	"github.com/ddstore/ddstore/telemetry"
)

// varSpec is a test variable: rows of rowBytes, member i of a group holds
// base+i rows, except that member emptyMember (if ≥ 0) holds none.
type varSpec struct {
	name        string
	dt          DType
	rowBytes    int64
	base        int64
	emptyMember int
}

func (v varSpec) rowElems() int { return int(v.rowBytes) / v.dt.Size() }

func (v varSpec) nLocal(member int) int64 {
	if member == v.emptyMember {
		return 0
	}
	return v.base + int64(member)
}

// salt of a variable in a group; groups hold equal replicas in content
// except for the salt, so a read that leaves the group fails the check.
func (v varSpec) salt(group int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(v.name))
	return h.Sum64() ^ uint64(group)*0x9e3779b97f4a7c15
}

// specFor is the matrix variable of one row size, with a dtype per size.
func specFor(rowBytes int64) varSpec {
	switch {
	case rowBytes <= 4096:
		return varSpec{name: fmt.Sprintf("f32-%d", rowBytes), dt: Float32, rowBytes: rowBytes, base: 150, emptyMember: -1}
	case rowBytes <= 16384:
		return varSpec{name: fmt.Sprintf("i64-%d", rowBytes), dt: Int64, rowBytes: rowBytes, base: 60, emptyMember: 2}
	case rowBytes <= 256<<10:
		return varSpec{name: fmt.Sprintf("u8-%d", rowBytes), dt: Uint8, rowBytes: rowBytes, base: 12, emptyMember: -1}
	}
	return varSpec{name: fmt.Sprintf("raw-%d", rowBytes), dt: Bytes, rowBytes: rowBytes, base: 5, emptyMember: -1}
}

// addPattern adds spec with this rank's rows of the global pattern (each
// group salted its own way: a read that leaves the group fails the check).
func addPattern(s *Store, spec varSpec) error { return addSalted(s, spec, spec.salt(s.Group())) }

// getter is the read API shared by Store and Reader.
type getter interface {
	Get(name string, start, count int64, dst []byte) error
	GetBatch(name string, idx []int64, dst []byte) error
}

// checkVar reads spec through g (Get ranges across every shard boundary,
// GetBatch of random indices with duplicates) and checks every row.
func checkVar(s *Store, g getter, spec varSpec, rng *rand.Rand) (calls int64, err error) {
	info, err := s.Query(spec.name)
	if err != nil {
		return 0, err
	}
	var want int64
	for i := 0; i < s.Width(); i++ {
		if info.Shards[i] != want {
			return 0, fmt.Errorf("%s: Shards %v: member %d starts at %d, want %d", spec.name, info.Shards, i, info.Shards[i], want)
		}
		want += spec.nLocal(i)
	}
	if info.GlobalRows != want || info.RowBytes != spec.rowBytes || info.DType != spec.dt {
		return 0, fmt.Errorf("%s: Query = %+v, want %d rows of %d bytes %s", spec.name, info, want, spec.rowBytes, spec.dt)
	}
	global, rb := info.GlobalRows, spec.rowBytes
	salt := spec.salt(s.Group())
	maxRows := int64(24<<20) / rb
	if maxRows > 400 {
		maxRows = 400
	}
	dst := make([]byte, maxRows*rb)

	var ranges [][2]int64
	ranges = append(ranges, [2]int64{0, min(global, maxRows)}, [2]int64{global - 1, 1}, [2]int64{0, 0})
	for _, b := range info.Shards[1 : len(info.Shards)-1] {
		lo := max(b-3, 0)
		ranges = append(ranges, [2]int64{lo, min(global-lo, 6)})
	}
	for i := 0; i < 4; i++ {
		n := 1 + rng.Int63n(min(global, maxRows))
		ranges = append(ranges, [2]int64{rng.Int63n(global - n + 1), n})
	}
	for _, r := range ranges {
		calls++
		poison(dst)
		if err := g.Get(spec.name, r[0], r[1], dst); err != nil {
			return calls, fmt.Errorf("Get(%s, %d, %d): %w", spec.name, r[0], r[1], err)
		}
		if err := checkRowsPoisoned(dst, rb, salt, seqIdx(r[0], r[1])); err != nil {
			return calls, fmt.Errorf("Get(%s, %d, %d): %w", spec.name, r[0], r[1], err)
		}
	}
	for round := 0; round < 3; round++ {
		n := min(maxRows, int64(1+rng.Intn(300)))
		idx := make([]int64, n)
		for i := range idx {
			switch {
			case i > 0 && rng.Intn(5) == 0:
				idx[i] = idx[rng.Intn(i)] // duplicate
			default:
				idx[i] = rng.Int63n(global)
			}
		}
		idx[0], idx[n-1] = global-1, 0
		calls++
		poison(dst)
		if err := g.GetBatch(spec.name, idx, dst); err != nil {
			return calls, fmt.Errorf("GetBatch(%s, %d rows): %w", spec.name, n, err)
		}
		if err := checkRowsPoisoned(dst, rb, salt, idx); err != nil {
			return calls, fmt.Errorf("GetBatch(%s, %d rows): %w", spec.name, n, err)
		}
	}
	return calls, nil
}

// poisonByte fills destinations before every checked read, so a row the
// read silently skipped keeps it and fails checkRowsPoisoned.
const poisonByte = 0xA5

func poison(dst []byte) {
	for i := range dst {
		dst[i] = poisonByte
	}
}

// checkRowsPoisoned is checkRows after poison: it first verifies that no
// requested row's pattern could pass for poison (rows of 8 bytes or more
// start with the same pattern word as an 8-byte row; shorter rows are
// checked whole), so a skipped row cannot match its pattern.
func checkRowsPoisoned(got []byte, rowBytes int64, salt uint64, idx []int64) error {
	if g, ok := poisonLike(rowBytes, salt, idx, poisonByte); ok {
		return fmt.Errorf("pattern row %d starts with %d poison bytes %#x: choose another poison", g, min(rowBytes, 8), poisonByte)
	}
	return checkRows(got, rowBytes, salt, idx)
}

// poisonLike returns a row of idx whose pattern could pass for marker (its
// first min(rowBytes, 8) bytes are all marker), and whether there is one.
func poisonLike(rowBytes int64, salt uint64, idx []int64, marker byte) (int64, bool) {
	var head [8]byte
	n := min(rowBytes, 8)
	for _, g := range idx {
		fillRow(head[:n], salt, g)
		if bytes.Count(head[:n], []byte{marker}) == int(n) {
			return g, true
		}
	}
	return 0, false
}

// poisonFor is a marker to fill a destination with before reading rows
// idx that no requested row's pattern could pass for: poisonByte, or for
// rows so short that one's pattern is all poisonByte (1 in 256 one-byte
// rows), the next byte value that none is.
func poisonFor(rowBytes int64, salt uint64, idx []int64) (byte, error) {
	for k := range 256 {
		m := byte(poisonByte + k)
		if _, like := poisonLike(rowBytes, salt, idx, m); !like {
			return m, nil
		}
	}
	return 0, fmt.Errorf("every byte value is the pattern of one of %d rows of %d bytes: no marker fits", len(idx), rowBytes)
}

// hotAllocs is the allocations per call of f, the least of up to 4 rounds
// of testing.AllocsPerRun(runs, f), and how many times f ran. AllocsPerRun
// counts the whole process's allocations, and the control plane's
// background work (a ring link dialled after Open, a heartbeat) can land
// in one round; a call that allocates does so in every round.
func hotAllocs(runs int, f func()) (allocs float64, calls int) {
	for range 4 {
		allocs, calls = testing.AllocsPerRun(runs, f), calls+runs+1 // one warm-up run
		if allocs == 0 {
			break
		}
	}
	return allocs, calls
}

// checkAllocs requires zero allocations of Get and GetBatch on g; it
// returns how many calls it made (telemetry counts them).
func checkAllocs(s *Store, g getter, spec varSpec, what string) (int, error) {
	info, err := s.Query(spec.name)
	if err != nil {
		return 0, err
	}
	n := min(info.GlobalRows, 130, int64(8<<20)/spec.rowBytes)
	dst := make([]byte, n*spec.rowBytes)
	idx := make([]int64, n)
	for i := range idx {
		idx[i] = (int64(i) * 7919) % info.GlobalRows
	}
	var callErr error
	a, batchCalls := hotAllocs(20, func() {
		if err := g.GetBatch(spec.name, idx, dst); err != nil {
			callErr = err
		}
	})
	if a != 0 || callErr != nil {
		return 0, fmt.Errorf("%s GetBatch(%s, %d rows): %v allocs per call (want 0), err %v", what, spec.name, n, a, callErr)
	}
	a, getCalls := hotAllocs(20, func() {
		if err := g.Get(spec.name, info.GlobalRows-n, n, dst); err != nil {
			callErr = err
		}
	})
	if a != 0 || callErr != nil {
		return 0, fmt.Errorf("%s Get(%s, %d rows): %v allocs per call (want 0), err %v", what, spec.name, n, a, callErr)
	}
	return batchCalls + getCalls, nil
}

func parseRows(s string) []int64 {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func init() {
	scenarios["matrix"] = scenarioMatrix
	scenarios["errors"] = scenarioErrors
	scenarios["width"] = scenarioWidth
	scenarios["badwidth"] = scenarioBadWidth
	scenarios["badprovider"] = scenarioBadProvider
	scenarios["concurrent"] = scenarioConcurrent
	scenarios["kill"] = scenarioKill
}

// scenarioMatrix: every row size of ROWS through the store's shared reader
// and through a Reader; zero allocations; telemetry counts every call.
func scenarioMatrix(w *worker) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "JOB=%s\n", s.Job())
	defer s.Close()
	r, err := s.NewReader()
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewSource(int64(w.rank) + 1))
	for _, rb := range parseRows(w.param("ROWS", "3072,12800")) {
		spec := specFor(rb)
		if err := addPattern(s, spec); err != nil {
			return fmt.Errorf("Add %s: %w", spec.name, err)
		}
		sharedCalls, err := checkVar(s, s, spec, rng)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		var gathered0 uint64
		if r.c.fr != nil {
			gathered0 = r.c.fr.GatheredOps()
		}
		readerCalls, err := checkVar(s, r, spec, rng)
		if err != nil {
			return fmt.Errorf("reader: %w", err)
		}
		// Auto gathers on tcp only rows of at most gatherMaxOpBytes.
		if r.c.fr != nil && w.mode == "tcp" {
			g := r.c.fr.GatheredOps() - gathered0
			if want := rb <= gatherMaxOpBytes; want != (g > 0) {
				return fmt.Errorf("mode tcp (auto), rows of %d bytes: %d rows served by gather", rb, g)
			}
		}
		if w.param("ALLOCS", "1") == "1" {
			n, err := checkAllocs(s, s, spec, "store")
			if err != nil {
				return err
			}
			sharedCalls += int64(n)
			if n, err = checkAllocs(s, r, spec, "reader"); err != nil {
				return err
			}
			readerCalls += int64(n)
		}
		if err := checkTelemetry(s, w.mode, spec.name, r.ID(), sharedCalls, readerCalls); err != nil {
			return err
		}
	}
	// A batch of up to the fabric's 4096-op chunk is one fabric call.
	if r.c.fr != nil && cap(r.c.ops) < queueOps {
		return fmt.Errorf("reader queue holds %d ops, want %d", cap(r.c.ops), queueOps)
	}
	// The fabric has the job's gather key (from the secret, or in an
	// insecure job from its identity), and no rank of the job was taken for
	// a stranger.
	if s.fab != nil && s.opts.Fabric.GatherKey == 0 {
		return fmt.Errorf("secret from %q but no gather key", s.Secret())
	}
	if w.param("INSECURE", "") == "1" {
		// No secret: the key of the job's identity (its job token, here the
		// job id every rank was given), so another job's requests are dropped.
		if s.Secret() != bootstrap.SecretInsecure {
			return fmt.Errorf("INSECURE=1 but the secret came from %q", s.Secret())
		}
		if k, want := s.opts.Fabric.GatherKey, gatherKey(nil, "job:"+s.job); k != want {
			return fmt.Errorf("insecure gather key %#x, want %#x (job %q)", k, want, s.job)
		}
	}
	if n := fabric.GatherStrangers(); n != 0 {
		return fmt.Errorf("%d gather requests of the job dropped as strangers'", n)
	}
	// The read mode decides the path of the reader's batches.
	if r.c.fr != nil {
		g := r.c.fr.GatheredOps()
		if want := w.mode == "tcp" || w.mode == "tcp-gather"; want != (g > 0) {
			return fmt.Errorf("mode %s (ReadMode %q): %d rows served by gather", w.mode, s.opts.ReadMode, g)
		}
	}
	if err := r.Close(); err != nil {
		return err
	}
	for _, rb := range parseRows(w.param("ROWS", "3072,12800")) {
		if err := s.Free(specFor(rb).name); err != nil {
			return err
		}
	}
	return s.Close()
}

// checkTelemetry reads this rank's segment and checks the call counts of
// the shared stripe (0) and the reader's stripe.
func checkTelemetry(s *Store, mode, name string, readerID int, shared, reader int64) error {
	w := s.Telemetry()
	if w == nil {
		return errors.New("telemetry is off")
	}
	seg, err := telemetry.Open(w.Path())
	if err != nil {
		return err
	}
	defer seg.Close()
	snap, err := seg.Snapshot()
	if err != nil {
		return err
	}
	v := snap.Var(name)
	if v == nil {
		return fmt.Errorf("telemetry: no variable %q in %s", name, w.Path())
	}
	get := func(id int) telemetry.Counters {
		if id < len(v.Readers) {
			return v.Readers[id]
		}
		return telemetry.Counters{}
	}
	c0, c1 := get(0), get(readerID)
	if c0.Calls != shared || c1.Calls != reader {
		return fmt.Errorf("telemetry %q: calls shared %d reader %d, want %d and %d", name, c0.Calls, c1.Calls, shared, reader)
	}
	if c0.Rows == 0 || c0.Bytes != c0.Rows*v.RowBytes || c0.LocalRows+c0.RemoteRows != c0.Rows {
		return fmt.Errorf("telemetry %q: shared counters inconsistent: %+v", name, c0)
	}
	// Readers never wait for a lock; the shared reader does (only when the
	// variable has shards behind the fabric). Local rows are mapped rows.
	lw := telemetry.PhaseLockWait
	if c1.PhaseNs[lw] != 0 {
		return fmt.Errorf("telemetry %q: reader %d has lock wait %dns, want 0", name, readerID, c1.PhaseNs[lw])
	}
	if remote := mode != "local"; remote != (c0.PhaseNs[lw] > 0) || remote != (c0.RemoteRows > 0) ||
		remote != (c1.PhaseNs[telemetry.PhaseCQWait]+c1.PhaseNs[telemetry.PhasePost] > 0) {
		return fmt.Errorf("telemetry %q in mode %s: shared lock wait %dns, remote rows %d, reader post+cq %dns",
			name, mode, c0.PhaseNs[lw], c0.RemoteRows, c1.PhaseNs[telemetry.PhaseCQWait]+c1.PhaseNs[telemetry.PhasePost])
	}
	if c1.PhaseNs[telemetry.PhaseCopy] <= 0 && mode == "local" {
		return fmt.Errorf("telemetry %q: no copy time on the mapped path", name)
	}
	var sum int64
	for _, p := range c1.PhaseNs {
		sum += p
	}
	if sum <= 0 {
		return fmt.Errorf("telemetry %q: reader phases all zero: %v", name, c1.PhaseNs)
	}
	// The peer table holds every row read, by the rank that owns it (the
	// tests' worlds have fewer ranks than a call names by rank).
	var peerRows, peerCalls int64
	for _, p := range snap.Peers {
		if p.Rank < 0 || p.Rank >= s.World() || p.Rows <= 0 || p.Bytes <= 0 {
			return fmt.Errorf("telemetry: bad peer slot %+v (world %d)", p, s.World())
		}
		if p.Rank != s.Rank() && mode != "local" && p.Ns <= 0 {
			return fmt.Errorf("telemetry: rank %d read from rank %d in no time: %+v", s.Rank(), p.Rank, p)
		}
		peerRows += p.Rows
		peerCalls += p.Calls
	}
	if tot := snap.Total(); peerRows != tot.Rows || peerCalls < tot.Calls-tot.Errors {
		return fmt.Errorf("telemetry: peer table has %d rows in %d calls, stripes %d rows in %d calls", peerRows, peerCalls, tot.Rows, tot.Calls)
	}
	return nil
}

// scenarioErrors: each bad input is a clear error and the store keeps working.
func scenarioErrors(w *worker) error {
	spec := specFor(3072)
	s, err := w.openWith(spec)
	if err != nil {
		return err
	}
	info, _ := s.Query(spec.name)
	rb, global := spec.rowBytes, info.GlobalRows
	dst := make([]byte, 4*rb)
	salt := spec.salt(s.Group())
	works := func(step string) error {
		idx := []int64{global - 1, 0, global / 2, global - 1}
		if err := s.GetBatch(spec.name, idx, dst); err != nil {
			return fmt.Errorf("after %s: %w", step, err)
		}
		if err := checkRows(dst, rb, salt, idx); err != nil {
			return fmt.Errorf("after %s: %w", step, err)
		}
		return nil
	}
	expect := func(step string, err, kind error, words ...string) error {
		if !errors.Is(err, kind) {
			return fmt.Errorf("%s: got %v, want %v", step, err, kind)
		}
		if s.Rank() == 1 {
			w.logf("%s: %v", step, err)
		}
		for _, wd := range words {
			if !strings.Contains(err.Error(), wd) {
				return fmt.Errorf("%s: error %q does not mention %q", step, err, wd)
			}
		}
		return works(step)
	}
	r, err := s.NewReader()
	if err != nil {
		return err
	}
	for _, g := range []getter{s, r} {
		g := g
		if err := expect("index -1", g.GetBatch(spec.name, []int64{0, -1}, dst), ErrIndex, "-1", spec.name); err != nil {
			return err
		}
		if err := expect("index global", g.GetBatch(spec.name, []int64{global}, dst), ErrIndex, strconv.FormatInt(global, 10)); err != nil {
			return err
		}
		if err := expect("range past end", g.Get(spec.name, global-2, 3, dst), ErrIndex, strconv.FormatInt(global+1, 10)); err != nil {
			return err
		}
		if err := expect("negative count", g.Get(spec.name, 0, -1, dst), ErrIndex); err != nil {
			return err
		}
		if err := expect("unknown var", g.GetBatch("nope", []int64{0}, dst), ErrUnknownVar, `"nope"`); err != nil {
			return err
		}
		if err := expect("unknown var Get", g.Get("nope", 0, 1, dst), ErrUnknownVar, `"nope"`); err != nil {
			return err
		}
		if err := expect("short dst", g.GetBatch(spec.name, []int64{0, 1}, dst[:rb+1]), ErrShortBuffer,
			strconv.FormatInt(2*rb, 10), strconv.FormatInt(rb+1, 10)); err != nil {
			return err
		}
		if err := expect("short dst Get", g.Get(spec.name, 0, 5, dst), ErrShortBuffer); err != nil {
			return err
		}
	}
	if _, err := s.Query("nope"); !errors.Is(err, ErrUnknownVar) {
		return fmt.Errorf("Query unknown: %v", err)
	}
	// Update bounds and content.
	if err := expect("update past end", s.Update(spec.name, make([]byte, rb), info.LocalRows), ErrIndex); err != nil {
		return err
	}
	if err := expect("update bad size", s.Update(spec.name, make([]byte, rb-1), 0), ErrDType); err != nil {
		return err
	}
	// Mismatched dtype: rank 1 says Int32 where the others say Float32.
	dt := Float32
	if s.Rank() == 1 {
		dt = Int32
	}
	err = s.Add("mm", dt, 4, make([]byte, 16*4))
	if err := expect("dtype mismatch", err, ErrMismatch, "dtype", "int32", "float32", "rank"); err != nil {
		return err
	}
	// Mismatched row size.
	elems := 4
	if s.Rank() == 2 {
		elems = 8
	}
	err = s.Add("mm", Float32, elems, make([]byte, 64))
	if err := expect("row mismatch", err, ErrMismatch, "row", "rank 2"); err != nil {
		return err
	}
	// Mismatched names.
	name := "mm"
	if s.Rank() == 0 {
		name = "other"
	}
	if err := expect("name mismatch", s.Add(name, Float32, 4, make([]byte, 64)), ErrMismatch, `"other"`, `"mm"`); err != nil {
		return err
	}
	// Local data not a whole number of rows on rank 3.
	data := make([]byte, 64)
	if s.Rank() == s.World()-1 {
		data = data[:63]
	}
	err = s.Add("mm", Float32, 4, data)
	want := ErrMismatch
	if s.Rank() == s.World()-1 {
		want = ErrDType
	}
	if err := expect("bad local length", err, want, "63"); err != nil {
		return err
	}
	// Nobody kept a half-made "mm" or "other": a good Add now works.
	for _, n := range []string{"mm", "other"} {
		if _, err := s.Query(n); !errors.Is(err, ErrUnknownVar) {
			return fmt.Errorf("%q kept after a failed Add: %v", n, err)
		}
	}
	// Names that sanitize to the same file name are distinct variables.
	if err := addPattern(s, varSpec{name: "a/b", dt: Int64, rowBytes: 8, base: 2, emptyMember: -1}); err != nil {
		return err
	}
	if err := addPattern(s, varSpec{name: "a_b", dt: Int64, rowBytes: 8, base: 3, emptyMember: -1}); err != nil {
		return err
	}
	for _, spec := range []varSpec{{name: "a/b", dt: Int64, rowBytes: 8, base: 2, emptyMember: -1},
		{name: "a_b", dt: Int64, rowBytes: 8, base: 3, emptyMember: -1}} {
		if _, err := checkVar(s, s, spec, rand.New(rand.NewSource(2))); err != nil {
			return err
		}
		if err := s.Free(spec.name); err != nil {
			return err
		}
	}
	good := varSpec{name: "mm", dt: Int32, rowBytes: 16, base: 3, emptyMember: -1}
	if err := addPattern(s, good); err != nil {
		return fmt.Errorf("good Add after mismatches: %w", err)
	}
	if _, err := checkVar(s, s, good, rand.New(rand.NewSource(1))); err != nil {
		return err
	}
	if err := expect("Add existing", addPattern(s, good), ErrExists, `"mm"`); err != nil {
		return err
	}
	// Update then read back: rank 0 overwrites its first row with the pattern of row 99999.
	if s.Rank() == 0 {
		row := make([]byte, good.rowBytes)
		fillRow(row, 77, 99999)
		if err := s.Update("mm", row, 0); err != nil {
			return err
		}
		got := make([]byte, good.rowBytes)
		if err := s.Get("mm", 0, 1, got); err != nil {
			return err
		}
		if err := checkRows(got, good.rowBytes, 77, []int64{99999}); err != nil {
			return fmt.Errorf("after Update: %w", err)
		}
	}
	// Update on every rank + Barrier: every rank then sees every new row.
	mi, _ := s.Query("mm")
	upd := make([]byte, mi.LocalRows*good.rowBytes)
	for i := int64(0); i < mi.LocalRows; i++ {
		fillRow(upd[i*good.rowBytes:(i+1)*good.rowBytes], 555, mi.LocalStart+i)
	}
	if err := s.Update("mm", upd, 0); err != nil {
		return err
	}
	if err := s.Barrier(); err != nil {
		return err
	}
	all := make([]byte, mi.GlobalRows*good.rowBytes)
	if err := s.Get("mm", 0, mi.GlobalRows, all); err != nil {
		return err
	}
	if err := checkRows(all, good.rowBytes, 555, seqIdx(0, mi.GlobalRows)); err != nil {
		return fmt.Errorf("after Update and Barrier: %w", err)
	}
	if err := s.Barrier(); err != nil { // nobody updates while others read
		return err
	}
	// Free mismatch, then real Free.
	fname := "mm"
	if s.Rank() == 1 {
		fname = spec.name
	}
	if err := expect("free mismatch", s.Free(fname), ErrMismatch, "name"); err != nil {
		return err
	}
	if err := s.Free("mm"); err != nil {
		return err
	}
	if err := expect("free unknown", s.Free("mm"), ErrUnknownVar, `"mm"`); err != nil {
		return err
	}
	if err := expect("Get freed", s.GetBatch("mm", []int64{0}, dst), ErrUnknownVar); err != nil {
		return err
	}
	// Init + Update: a zero-filled variable.
	if err := s.Init("z", Int64, 2, 4); err != nil {
		return err
	}
	zi, _ := s.Query("z")
	zb := make([]byte, zi.GlobalRows*16)
	for i := range zb {
		zb[i] = 1
	}
	if err := s.Get("z", 0, zi.GlobalRows, zb); err != nil {
		return err
	}
	for i, b := range zb {
		if b != 0 {
			return fmt.Errorf("Init: byte %d is %d, want 0", i, b)
		}
	}
	// Use after Close.
	v, _ := s.Var(spec.name)
	if err := s.Close(); err != nil {
		return fmt.Errorf("Close: %w", err)
	}
	checks := []struct {
		what string
		err  error
	}{
		{"Get", s.Get(spec.name, 0, 1, dst)},
		{"GetBatch", s.GetBatch(spec.name, []int64{0}, dst)},
		{"Var.GetBatch", v.GetBatch([]int64{0}, dst)},
		{"Reader.GetBatch", r.GetBatch(spec.name, []int64{0}, dst)},
		{"Add", s.Add("late", Bytes, 1, nil)},
		{"Free", s.Free(spec.name)},
		{"Update", s.Update(spec.name, dst[:rb], 0)},
		{"Close", s.Close()},
	}
	if _, err := s.NewReader(); !errors.Is(err, ErrClosed) {
		return fmt.Errorf("NewReader after Close: %v", err)
	}
	if _, err := s.Query(spec.name); !errors.Is(err, ErrClosed) {
		return fmt.Errorf("Query after Close: %v", err)
	}
	for _, c := range checks {
		if !errors.Is(c.err, ErrClosed) {
			return fmt.Errorf("%s after Close: got %v, want ErrClosed", c.what, c.err)
		}
	}
	return nil
}

// scenarioWidth: groups of WIDTH ranks, each a full replica.
func scenarioWidth(w *worker) error {
	spec := varSpec{name: "wide", dt: Float64, rowBytes: 96, base: 40, emptyMember: -1}
	s, err := w.openWith(spec)
	if err != nil {
		return err
	}
	defer s.Close()
	info, _ := s.Query(spec.name)
	lo := s.Rank() / s.Width() * s.Width()
	for i, r := range info.GroupRanks {
		if r != lo+i {
			return fmt.Errorf("GroupRanks %v, want from %d", info.GroupRanks, lo)
		}
	}
	if len(info.GroupRanks) != s.Width() || info.Group != s.Rank()/s.Width() {
		return fmt.Errorf("group %d ranks %v with width %d", info.Group, info.GroupRanks, s.Width())
	}
	if _, err := checkVar(s, s, spec, rand.New(rand.NewSource(int64(s.Rank())))); err != nil {
		return err
	}
	return s.Close()
}

func scenarioBadWidth(w *worker) error {
	s, err := w.open()
	if err == nil {
		s.Close()
		return errors.New("Open with a world size that is not a multiple of Width succeeded")
	}
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not a multiple of Width 3") {
		return fmt.Errorf("Open with Width 3: %v, want ErrInvalid naming Width 3", err)
	}
	return nil
}

// scenarioBadProvider: rank 1 asks for a provider that does not exist;
// every rank's Open fails, naming rank 1 and the provider.
func scenarioBadProvider(w *worker) error {
	o := storeOptions("tcp", w.params)
	rank, _ := strconv.Atoi(os.Getenv("RANK"))
	if rank == 1 {
		o.Fabric.Provider = "no-such-provider"
	}
	s, err := Open(o)
	if err == nil {
		s.Close()
		return errors.New("Open succeeded although rank 1's fabric cannot open")
	}
	w.logf("Open: %v", err)
	for _, word := range []string{"rank 1", "no-such-provider"} {
		if !strings.Contains(err.Error(), word) {
			return fmt.Errorf("Open error does not name %q: %v", word, err)
		}
	}
	// Rank 1's own error is the fabric's ErrNoProvider; the others learn of
	// it as rank 1's failure (Remote), in words only.
	if ranks := fault.RanksOf(err); !slices.Equal(ranks, []int{1}) {
		return fmt.Errorf("Open error names ranks %v, want [1]: %v", ranks, err)
	}
	if rank == 1 {
		if !errors.Is(err, fault.ErrNoProvider) || !fault.IsLocal(err) {
			return fmt.Errorf("rank 1's Open: %v (side %v), want a local fault.ErrNoProvider", err, fault.SideOf(err))
		}
	} else if !fault.IsRemote(err) {
		return fmt.Errorf("Open: %v (side %v), want rank 1's remote failure", err, fault.SideOf(err))
	}
	return nil
}

// scenarioConcurrent: Readers and shared-store calls from many goroutines.
func scenarioConcurrent(w *worker) error {
	spec := varSpec{name: "conc", dt: Float32, rowBytes: 3072, base: 50, emptyMember: -1}
	s, err := w.openWith(spec)
	if err != nil {
		return err
	}
	defer s.Close()
	iters := w.intParam("ITERS", 20)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for gi := 0; gi < 6; gi++ {
		wg.Add(1)
		go func(gi int) {
			defer wg.Done()
			var g getter = s
			if gi < 4 {
				r, err := s.NewReader()
				if err != nil {
					errs <- err
					return
				}
				defer r.Close()
				g = r
			}
			rng := rand.New(rand.NewSource(int64(s.Rank()*100 + gi)))
			for i := 0; i < iters; i++ {
				if _, err := checkVar(s, g, spec, rng); err != nil {
					errs <- fmt.Errorf("goroutine %d: %w", gi, err)
					return
				}
			}
		}(gi)
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return s.Close()
}

// scenarioKill: the last rank SIGKILLs itself after Add; the others must
// get an error naming it within the deadline and keep reading the rest.
func scenarioKill(w *worker) error {
	spec := varSpec{name: "victim", dt: Bytes, rowBytes: 3072, base: 20, emptyMember: -1}
	s, err := w.openWith(spec)
	if err != nil {
		return err
	}
	victim := s.World() - 1
	if s.Rank() == victim {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	}
	info, _ := s.Query(spec.name)
	salt := spec.salt(0)
	vRows := seqIdx(info.Shards[victim], 4)
	var others []int64
	for g := int64(0); g < info.Shards[victim]; g += 7 {
		others = append(others, g)
	}
	dst := make([]byte, int64(len(others)+len(vRows))*spec.rowBytes)
	deadline := time.Now().Add(time.Duration(w.intParam("DEADLINE_S", 15)) * time.Second)
	t0 := time.Now()
	for {
		err := s.GetBatch(spec.name, vRows, dst)
		if err == nil {
			if err := checkRows(dst, spec.rowBytes, salt, vRows); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("reads of dead rank %d still succeed after %v", victim, time.Since(t0))
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if !errors.Is(err, ErrPeerDead) && !errors.Is(err, ErrTimeout) {
			return fmt.Errorf("read of dead rank: got %v, want ErrPeerDead or ErrTimeout", err)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("rank %d", victim)) {
			return fmt.Errorf("error does not name rank %d: %v", victim, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dead rank detected after %v, past the deadline: %v", time.Since(t0), err)
		}
		w.logf("dead rank detected after %v: %v", time.Since(t0).Round(time.Millisecond), err)
		break
	}
	// The other ranks' rows keep working, through the store and a Reader.
	r, err := s.NewReader()
	if err != nil {
		return err
	}
	for _, g := range []getter{s, r} {
		for i := 0; i < 3; i++ {
			if err := g.GetBatch(spec.name, others, dst); err != nil {
				return fmt.Errorf("read of live ranks after the kill: %w", err)
			}
			if err := checkRows(dst, spec.rowBytes, salt, others); err != nil {
				return err
			}
		}
	}
	// A mixed batch fails naming the victim.
	mixed := append(append([]int64{}, others...), vRows...)
	if err := s.GetBatch(spec.name, mixed, dst); !errors.Is(err, ErrPeerDead) && !errors.Is(err, ErrTimeout) {
		return fmt.Errorf("mixed batch with dead rows: %v", err)
	} else if w.mode == "local" {
		if err := checkRows(dst, spec.rowBytes, salt, others); err != nil {
			return fmt.Errorf("live rows of a mixed batch: %w", err)
		}
	}
	r.Close()
	// The bootstrap cannot hold a barrier without the victim: meet the
	// other survivors through files, so nobody exits while others read.
	if err := fileBarrier(w.param("TELDIR", os.TempDir()), "survivors", w.rank, victim, 60*time.Second); err != nil {
		return err
	}
	// Close cannot meet the dead rank at its barrier: it must still return.
	t1 := time.Now()
	err = s.Close()
	w.logf("Close after the kill took %v: %v", time.Since(t1).Round(time.Millisecond), err)
	if time.Since(t1) > 40*time.Second { // Timeout 4s: the barrier gives up long before
		return fmt.Errorf("Close took %v", time.Since(t1))
	}
	return nil
}

var allRows = []int64{3072, 12800, 204800, 1048576}

func rowsParam() string {
	rows := allRows
	if testing.Short() {
		rows = rows[:3]
	}
	var parts []string
	for _, r := range rows {
		parts = append(parts, strconv.FormatInt(r, 10))
	}
	return strings.Join(parts, ",")
}

func TestMatrix(t *testing.T) {
	for _, mode := range []string{"local", "tcp", "tcp-rma", "shm"} {
		t.Run("path="+mode, func(t *testing.T) {
			spawnRanks(t, 4, "matrix", map[string]string{"MODE": mode, "ROWS": rowsParam()}, 120*time.Second, nil)
		})
	}
}

// TestMatrixInsecure: an insecure job (DDSTORE_INSECURE) still has a
// gather key, derived from its identity, the same on every rank: its
// gathers are answered (none dropped as a stranger's) and every row checks.
func TestMatrixInsecure(t *testing.T) {
	spawnRanks(t, 4, "matrix", map[string]string{"MODE": "tcp", "ROWS": "3072", "INSECURE": "1"}, 120*time.Second, nil)
}

func TestBadInputs(t *testing.T) {
	spawnRanks(t, 4, "errors", map[string]string{"MODE": "local"}, 60*time.Second, nil)
}

func TestBadInputsFabric(t *testing.T) {
	spawnRanks(t, 4, "errors", map[string]string{"MODE": "tcp"}, 60*time.Second, nil)
}

// TestWidth: each group's salt differs, so a row read from another group
// fails its check; failover (which would rightly move a read that misses
// its deadline on a loaded machine to the other group) waits 60 s here.
func TestWidth(t *testing.T) {
	spawnRanks(t, 4, "width", map[string]string{"MODE": "local", "WIDTH": "2"}, 60*time.Second, nil)
	spawnRanks(t, 4, "width", map[string]string{"MODE": "tcp", "WIDTH": "2", "FAILOVER": "60s"}, 60*time.Second, nil)
}

func TestOpenErrors(t *testing.T) {
	spawnRanks(t, 4, "badwidth", map[string]string{"MODE": "local", "WIDTH": "3"}, 60*time.Second, nil)
	spawnRanks(t, 3, "badprovider", map[string]string{"MODE": "tcp"}, 60*time.Second, nil)
}

// TestConcurrentReaders is the small variant meant for -race.
func TestConcurrentReaders(t *testing.T) {
	for _, mode := range []string{"local", "tcp"} {
		t.Run("path="+mode, func(t *testing.T) {
			spawnRanks(t, 4, "concurrent", map[string]string{"MODE": mode, "ITERS": "4"}, 120*time.Second, nil)
		})
	}
}

func TestKilledRank(t *testing.T) {
	for _, mode := range []string{"local", "tcp", "shm"} {
		t.Run("path="+mode, func(t *testing.T) {
			res := spawnRanks(t, 4, "kill", map[string]string{"MODE": mode, "FTIMEOUT": "2s", "TIMEOUT": "4s",
				"DEADLINE_S": "30"}, 120*time.Second,
				func(r rankResult) bool { return r.rank == 3 && killedBySignal(r.err, syscall.SIGKILL) })
			if !killedBySignal(res[3].err, syscall.SIGKILL) {
				t.Errorf("rank 3 was not killed: %v\n%s", res[3].err, res[3].output)
			}
		})
	}
}

// TestMPIExec runs the matrix scenario under MPICH's mpiexec (PMI exchange)
// and under Open MPI's mpirun (its environment; the node's session
// directory as the exchange). Both by their full names: with both
// installed, a bare mpiexec is whichever the alternatives chose.
func TestMPIExec(t *testing.T) {
	mpirun := []string{"-n", "4", "--oversubscribe", "-x", workerEnv, "-x", "DDT_MODE", "-x", "DDT_ROWS", "-x", "DDT_TELDIR"}
	if os.Geteuid() == 0 {
		mpirun = append(mpirun, "--allow-run-as-root")
	}
	for _, l := range []struct {
		name, prog, pkg string
		args            []string
	}{
		{"mpich", "mpiexec.mpich", "mpich", []string{"-n", "4"}},
		{"openmpi", "mpirun.openmpi", "openmpi-bin", mpirun},
	} {
		t.Run(l.name, func(t *testing.T) {
			prog, err := exec.LookPath(l.prog)
			if err != nil {
				skipOrRequire(t, "DDSTORE_REQUIRE_MPI", "%s not installed (Debian package %s)", l.prog, l.pkg)
			}
			cmd := exec.Command(prog, append(l.args, os.Args[0], "-test.run=^$")...)
			cmd.Env = append(cleanEnv(), workerEnv+"=matrix", "DDT_MODE=tcp", "DDT_ROWS=3072,12800", "DDT_TELDIR="+t.TempDir())
			timer := time.AfterFunc(90*time.Second, func() {
				if cmd.Process != nil {
					cmd.Process.Kill()
				}
			})
			out, err := cmd.CombinedOutput()
			timer.Stop()
			if err != nil {
				t.Fatalf("%s: %v\n%s", l.prog, err, out)
			}
			jobs := regexp.MustCompile(`JOB=(\S+)`).FindAllStringSubmatch(string(out), -1)
			if len(jobs) != 4 {
				t.Fatalf("want 4 ranks reporting their job, got %d:\n%s", len(jobs), out)
			}
			for _, j := range jobs {
				if j[1] != jobs[0][1] {
					t.Errorf("ranks disagree on the job id: %q vs %q", j[1], jobs[0][1])
				}
			}
			checkNoShardFiles(t, jobs[0][1])
		})
	}
}

// fileBarrier waits until ranks [0, n) have each created dir/tag.<rank>.
func fileBarrier(dir, tag string, rank, n int, timeout time.Duration) error {
	if err := os.WriteFile(fmt.Sprintf("%s/%s.%d", dir, tag, rank), nil, 0o600); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for r := 0; r < n; r++ {
		for {
			if _, err := os.Stat(fmt.Sprintf("%s/%s.%d", dir, tag, r)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("file barrier %s: rank %d did not arrive within %v", tag, r, timeout)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// openSingleJob opens a one-rank store (every shard mapped, no fabric) of
// a new job named after tag, with telemetry in a temporary directory;
// change, where not nil, edits the options first. The caller closes it.
func openSingleJob(t *testing.T, tag string, change ...func(*Options)) (*Store, string) {
	t.Helper()
	o := DefaultOptions()
	o.TelemetryDir = t.TempDir()
	o.Bootstrap.Method = "single"
	job := testJob(tag)
	o.Bootstrap.Env = bootstrap.Env{Rank: 0, World: 1, LocalWorld: 1, Launcher: "none", Job: job}
	for _, c := range change {
		if c != nil {
			c(&o)
		}
	}
	s, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return s, job
}

// openSingle opens a one-rank store (every shard mapped, no fabric) with
// telemetry in a temporary directory; change, if any, edits the options.
func openSingle(t *testing.T, tag string, change ...func(*Options)) *Store {
	t.Helper()
	s, job := openSingleJob(t, tag, change...)
	t.Cleanup(func() {
		s.Close()
		checkNoShardFiles(t, job)
	})
	return s
}

// telemetryVar is the snapshot of variable name in s's segment.
func telemetryVar(t *testing.T, s *Store, name string) *telemetry.VarSnapshot {
	t.Helper()
	if s.Telemetry() == nil {
		t.Fatal("telemetry is off")
	}
	seg, err := telemetry.Open(s.Telemetry().Path())
	if err != nil {
		t.Fatal(err)
	}
	defer seg.Close()
	snap, err := seg.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	v := snap.Var(name)
	if v == nil {
		t.Fatalf("telemetry: no variable %q", name)
	}
	return v
}

// TestConcurrentStoreTelemetry: goroutines sharing the Store path (stripe
// 0) on an all-mapped variable, where no call takes the variable's lock,
// with good calls, early errors and empty Gets: telemetry totals are exact.
func TestConcurrentStoreTelemetry(t *testing.T) {
	s := openSingle(t, "conctel")
	spec := varSpec{name: "ct", dt: Int32, rowBytes: 24, base: 500, emptyMember: -1}
	if err := addPattern(s, spec); err != nil {
		t.Fatal(err)
	}
	const workers, iters = 8, 300
	var want telemetry.Counters
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for gi := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(gi) + 7))
			var mine telemetry.Counters
			dst := make([]byte, 64*spec.rowBytes)
			for i := range iters {
				n := 1 + rng.Int63n(64)
				idx := make([]int64, n)
				for k := range idx {
					idx[k] = rng.Int63n(spec.base)
				}
				poison(dst)
				mine.Calls++
				mine.Rows += n
				switch i % 10 {
				case 7: // early error: bad index
					idx[n-1] = spec.base
					mine.Errors++
					if err := s.GetBatch(spec.name, idx, dst); !errors.Is(err, ErrIndex) {
						errs <- fmt.Errorf("bad index: %v", err)
						return
					}
				case 8: // early error: short buffer
					mine.Errors++
					if err := s.GetBatch(spec.name, idx, dst[:n*spec.rowBytes-1]); !errors.Is(err, ErrShortBuffer) {
						errs <- fmt.Errorf("short buffer: %v", err)
						return
					}
				case 9: // empty Get
					mine.Rows -= n
					if err := s.Get(spec.name, idx[0], 0, dst); err != nil {
						errs <- fmt.Errorf("empty Get: %v", err)
						return
					}
				default:
					mine.LocalRows += n
					if err := s.GetBatch(spec.name, idx, dst); err != nil {
						errs <- err
						return
					}
					if err := checkRowsPoisoned(dst, spec.rowBytes, spec.salt(0), idx); err != nil {
						errs <- err
						return
					}
				}
			}
			mu.Lock()
			want.Calls += mine.Calls
			want.Rows += mine.Rows
			want.LocalRows += mine.LocalRows
			want.Errors += mine.Errors
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	v := telemetryVar(t, s, spec.name)
	c := v.Readers[0]
	if c.Calls != want.Calls || c.Rows != want.Rows || c.Bytes != want.Rows*spec.rowBytes ||
		c.LocalRows != want.LocalRows || c.RemoteRows != 0 || c.Errors != want.Errors {
		t.Fatalf("stripe 0: calls %d rows %d bytes %d local %d remote %d errors %d; want calls %d rows %d bytes %d local %d errors %d",
			c.Calls, c.Rows, c.Bytes, c.LocalRows, c.RemoteRows, c.Errors,
			want.Calls, want.Rows, want.Rows*spec.rowBytes, want.LocalRows, want.Errors)
	}
	if got := int64(c.CallHist.Count()); got != want.Calls {
		t.Fatalf("stripe 0 call histogram holds %d calls, want %d", got, want.Calls)
	}
	if want.Calls != workers*iters {
		t.Fatalf("test counted %d calls", want.Calls)
	}
}

// TestConcurrentManyReadersTelemetry: 70 Readers open at once, each in its
// own goroutine: the first maxTelReaders-2 own a stripe each, the rest
// share the last (atomic) stripe; no two live Readers share an owned
// stripe, totals are exact, and a closed Reader's stripe is reused.
func TestConcurrentManyReadersTelemetry(t *testing.T) {
	s := openSingle(t, "manyrd")
	spec := varSpec{name: "mr", dt: Float32, rowBytes: 16, base: 300, emptyMember: -1}
	if err := addPattern(s, spec); err != nil {
		t.Fatal(err)
	}
	const nReaders, calls = 70, 5
	readers := make([]*Reader, nReaders)
	owned := map[int]int{}
	for i := range readers {
		r, err := s.NewReader()
		if err != nil {
			t.Fatal(err)
		}
		readers[i] = r
		id := r.ID()
		switch {
		case i < maxTelReaders-2:
			if id < 1 || id > maxTelReaders-2 {
				t.Fatalf("reader %d: id %d outside [1,%d]", i, id, maxTelReaders-2)
			}
			if j, dup := owned[id]; dup {
				t.Fatalf("readers %d and %d both own stripe %d", j, i, id)
			}
			owned[id] = i
		default:
			if id != maxTelReaders-1 {
				t.Fatalf("reader %d (past the owned stripes): id %d, want %d", i, id, maxTelReaders-1)
			}
		}
	}
	wantRows := make([]int64, maxTelReaders)
	wantCalls := make([]int64, maxTelReaders)
	for i, r := range readers {
		for k := range calls {
			n := int64(1 + (i+k)%9)
			wantRows[r.ID()] += n
			wantCalls[r.ID()]++
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, nReaders)
	for i, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dst := make([]byte, 9*spec.rowBytes)
			for k := range calls {
				n := int64(1 + (i+k)%9)
				idx := make([]int64, n)
				for j := range idx {
					idx[j] = (int64(i*31+k*7+j) * 13) % spec.base
				}
				poison(dst)
				if err := r.GetBatch(spec.name, idx, dst); err != nil {
					errs <- err
					return
				}
				if err := checkRowsPoisoned(dst, spec.rowBytes, spec.salt(0), idx); err != nil {
					errs <- fmt.Errorf("reader %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	v := telemetryVar(t, s, spec.name)
	for id := range maxTelReaders {
		var c telemetry.Counters
		if id < len(v.Readers) {
			c = v.Readers[id]
		}
		if c.Calls != wantCalls[id] || c.Rows != wantRows[id] || c.LocalRows != wantRows[id] || c.Bytes != wantRows[id]*spec.rowBytes {
			t.Errorf("stripe %d: calls %d rows %d local %d bytes %d; want calls %d rows %d",
				id, c.Calls, c.Rows, c.LocalRows, c.Bytes, wantCalls[id], wantRows[id])
		}
	}
	if wantCalls[maxTelReaders-1] != (nReaders-(maxTelReaders-2))*calls {
		t.Fatalf("shared stripe expected %d calls", wantCalls[maxTelReaders-1])
	}
	// Closing an owner frees its stripe for the next Reader.
	freed := readers[5].ID()
	if err := readers[5].Close(); err != nil {
		t.Fatal(err)
	}
	r, err := s.NewReader()
	if err != nil {
		t.Fatal(err)
	}
	if r.ID() != freed {
		t.Fatalf("new reader got stripe %d, want the freed %d", r.ID(), freed)
	}
	r.Close()
	for _, r := range readers {
		r.Close()
	}
}
