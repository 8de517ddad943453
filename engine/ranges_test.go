package engine

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"
)

func init() { scenarios["ranges"] = scenarioRanges }

// TestGetRanges reads packed variable-length records (a uint8 variable of
// one byte per row) and multi-byte rows with GetRanges on every path:
// ranges across every shard boundary, empty ranges, random 1–16 KB
// records, through the Store and a Reader; no allocation; bad ranges fail
// with errors naming the range.
func TestGetRanges(t *testing.T) {
	for _, mode := range []string{"local", "tcp", "tcp-rma", "shm"} {
		t.Run("path="+mode, func(t *testing.T) {
			spawnRanks(t, 4, "ranges", map[string]string{"MODE": mode}, 120*time.Second, nil)
		})
	}
}

// rangeGetter is GetRanges of Store and Reader.
type rangeGetter interface {
	GetRanges(name string, starts, counts []int64, dst []byte) error
}

// checkRanges reads ranges through g into one packed buffer and checks
// every row against the pattern.
func checkRanges(g rangeGetter, spec varSpec, salt uint64, starts, counts []int64) error {
	var total int64
	for _, n := range counts {
		total += n
	}
	dst := make([]byte, total*spec.rowBytes+7) // slack: must stay untouched
	for i := range dst {
		dst[i] = 0xA5
	}
	if err := g.GetRanges(spec.name, starts, counts, dst); err != nil {
		return fmt.Errorf("GetRanges(%s, %d ranges, %d rows): %w", spec.name, len(starts), total, err)
	}
	var at int64
	for i, s := range starts {
		n := counts[i]
		part := dst[at*spec.rowBytes : (at+n)*spec.rowBytes]
		if err := checkRows(part, spec.rowBytes, salt, seqIdx(s, n)); err != nil {
			return fmt.Errorf("GetRanges(%s) range %d [%d,%d): %w", spec.name, i, s, s+n, err)
		}
		at += n
	}
	for _, b := range dst[total*spec.rowBytes:] {
		if b != 0xA5 {
			return fmt.Errorf("GetRanges(%s) wrote past its %d rows", spec.name, total)
		}
	}
	return nil
}

func scenarioRanges(w *worker) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	defer s.Close()
	r, err := s.NewReader()
	if err != nil {
		return err
	}
	defer r.Close()
	rng := rand.New(rand.NewSource(int64(w.rank) + 7))
	// Packed records: one byte per row, shards of 40–70 KB (member 2 empty).
	packed := varSpec{name: "records", dt: Uint8, rowBytes: 1, base: 40 << 10, emptyMember: 2}
	rows := varSpec{name: "rows12", dt: Int32, rowBytes: 12, base: 300, emptyMember: -1}
	for _, spec := range []varSpec{packed, rows} {
		if err := addPattern(s, spec); err != nil {
			return fmt.Errorf("Add %s: %w", spec.name, err)
		}
		info, err := s.Query(spec.name)
		if err != nil {
			return err
		}
		global := info.GlobalRows
		salt := spec.salt(s.Group())
		// Ranges across every shard boundary, an empty range, the last row.
		var starts, counts []int64
		for _, b := range info.Shards[1 : len(info.Shards)-1] {
			lo := max(b-5, 0)
			starts, counts = append(starts, lo), append(counts, min(global-lo, 11))
		}
		starts, counts = append(starts, 3, global-1, 0), append(counts, 0, 1, 2)
		// Random records of 1–16 KB (or 1–40 rows).
		maxLen := int64(16 << 10)
		if spec.rowBytes > 1 {
			maxLen = 40
		}
		for i := 0; i < 128; i++ {
			n := 1 + rng.Int63n(maxLen)
			starts, counts = append(starts, rng.Int63n(global-n+1)), append(counts, n)
		}
		// The whole variable in one range.
		for _, g := range []rangeGetter{s, r} {
			if err := checkRanges(g, spec, salt, starts, counts); err != nil {
				return err
			}
			if err := checkRanges(g, spec, salt, []int64{0}, []int64{global}); err != nil {
				return err
			}
			if err := checkRanges(g, spec, salt, nil, nil); err != nil {
				return err
			}
		}
		// No allocation on the hot path.
		var total int64
		for _, n := range counts {
			total += n
		}
		dst := make([]byte, total*spec.rowBytes)
		for _, g := range []rangeGetter{s, r} {
			var callErr error
			if a, _ := hotAllocs(10, func() {
				if err := g.GetRanges(spec.name, starts, counts, dst); err != nil {
					callErr = err
				}
			}); a != 0 || callErr != nil {
				return fmt.Errorf("GetRanges(%s): %v allocs per call (want 0), err %v", spec.name, a, callErr)
			}
		}
		// Bad ranges: each names the cause, reads nothing.
		bad := []struct {
			starts, counts []int64
			dst            int64
			want           error
			text           string
		}{
			{[]int64{0, -1}, []int64{1, 1}, 2, ErrIndex, "range 1 of 2"},
			{[]int64{global - 2}, []int64{3}, 3, ErrIndex, "outside [0,"},
			{[]int64{0}, []int64{-1}, 1, ErrIndex, "count -1"},
			{[]int64{1 << 62}, []int64{1 << 62}, 1, ErrIndex, "range 0 of 1"},
			{[]int64{0, 1}, []int64{1}, 2, ErrIndex, "2 starts and 1 counts"},
			{[]int64{0, 5}, []int64{4, 4}, 7, ErrShortBuffer, "need"},
		}
		for _, b := range bad {
			d := make([]byte, b.dst*spec.rowBytes)
			err := s.GetRanges(spec.name, b.starts, b.counts, d)
			if !errors.Is(err, b.want) || !strings.Contains(err.Error(), b.text) || !strings.Contains(err.Error(), spec.name) {
				return fmt.Errorf("GetRanges(%s, %v, %v, %d rows): err %v, want %v naming %q", spec.name, b.starts, b.counts, b.dst, err, b.want, b.text)
			}
			for _, x := range d {
				if x != 0 {
					return fmt.Errorf("GetRanges(%s, %v, %v) failed but wrote into dst", spec.name, b.starts, b.counts)
				}
			}
		}
	}
	if err := s.GetRanges("nope", []int64{0}, []int64{1}, make([]byte, 1)); !errors.Is(err, ErrUnknownVar) {
		return fmt.Errorf("GetRanges of an unknown variable: %v, want ErrUnknownVar", err)
	}
	if err := r.Close(); err != nil {
		return err
	}
	if err := r.GetRanges("records", []int64{0}, []int64{1}, make([]byte, 1)); !errors.Is(err, ErrClosed) {
		return fmt.Errorf("GetRanges on a closed reader: %v, want ErrClosed", err)
	}
	return nil
}
