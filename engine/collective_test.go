package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func init() {
	scenarios["collectives"] = scenarioCollectives
}

// TestAllGatherAllReduce runs AllGather and AllReduceFloat32 on 4 real
// ranks (TCP bootstrap), interleaved with the store's other collectives.
func TestAllGatherAllReduce(t *testing.T) {
	spawnRanks(t, 4, "collectives", map[string]string{"MODE": "local", "TIMEOUT": "20s"}, 90*time.Second, nil)
}

// gatherBlob is rank r's blob of round k: 3·r bytes (rank 0's is empty)
// of the row pattern.
func gatherBlob(r, k int) []byte {
	b := make([]byte, 3*r)
	fillRow(b, 0xa11+uint64(k), int64(r))
	return b
}

// reduceUnits is rank r's element i in sixteenths: below 2^18 in
// magnitude (up to 10 significant bits shifted by 0 to 8), both signs.
// Every partial sum of up to 64 ranks is then under 2^24 sixteenths,
// exact in float32: the sum is the same in any order, and the test
// computes it in integers.
func reduceUnits(r, i int) int64 {
	h := splitmix64(uint64(r)<<32 | uint64(i))
	u := int64(h>>54) << ((h >> 8) % 9)
	if h&1 != 0 {
		u = -u
	}
	return u
}

func reduceInput(r, i int) float32 { return float32(reduceUnits(r, i)) / 16 }

func checkGather(s *Store, k int) error {
	tag := fmt.Sprintf("g%d", k)
	blobs, err := s.AllGather(tag, gatherBlob(s.Rank(), k))
	if err != nil {
		return fmt.Errorf("AllGather %s: %w", tag, err)
	}
	if len(blobs) != s.World() {
		return fmt.Errorf("AllGather %s: %d blobs for %d ranks", tag, len(blobs), s.World())
	}
	for r, b := range blobs {
		if want := gatherBlob(r, k); !bytes.Equal(b, want) {
			return fmt.Errorf("AllGather %s: blob of rank %d is %x, want %x", tag, r, b, want)
		}
	}
	return nil
}

// checkReduce checks the summation order (checkReduceOrder), then sums
// n elements whose sum is exact, against the sum computed in integers.
func checkReduce(s *Store, n int) error {
	if err := checkReduceOrder(s); err != nil {
		return err
	}
	w := s.World()
	if w > 64 {
		return fmt.Errorf("checkReduce: %d ranks, its inputs are exact for up to 64", w)
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = reduceInput(s.Rank(), i)
	}
	if err := s.AllReduceFloat32("sum", x); err != nil {
		return fmt.Errorf("AllReduceFloat32: %w", err)
	}
	for i := range x {
		var units int64
		for r := range w {
			units += reduceUnits(r, i)
		}
		if want := float32(units) / 16; math.Float32bits(x[i]) != math.Float32bits(want) {
			return fmt.Errorf("AllReduceFloat32: element %d = %v (%#x), want the exact sum %v (%#x)",
				i, x[i], math.Float32bits(x[i]), want, math.Float32bits(want))
		}
	}
	// Every rank holds the same bits.
	mine := make([]byte, 4*n)
	for i, v := range x {
		binary.LittleEndian.PutUint32(mine[4*i:], math.Float32bits(v))
	}
	blobs, err := s.AllGather("result", mine)
	if err != nil {
		return err
	}
	for r, b := range blobs {
		if !bytes.Equal(b, mine) {
			return fmt.Errorf("AllReduceFloat32: rank %d's result differs from rank %d's", r, s.Rank())
		}
	}
	return nil
}

// checkReduceOrder pins AllReduceFloat32's documented order on 4 ranks:
// segment c of a vector of l elements is [c·l/4, (c+1)·l/4) and its sum
// is ((x_c + x_{c+1}) + x_{c+2}) + x_{c+3}, ranks modulo 4. Each rank
// passes its value of orderInputs in every element; with 2^25 and its
// rounding, each start gives another float32 result (the exact sum is 3;
// reversed or pairwise orders give others), worked out by hand:
//
//	c=0: ((2^25 + 2) − 2^25) + 1 = (2^25 − 2^25) + 1 = 1   (2^25+2 ties to even 2^25)
//	c=1: ((2 − 2^25) + 1) + 2^25 = (−(2^25−4)) + 2^25 = 4  (−(2^25−3) ties to even)
//	c=2: ((−2^25 + 1) + 2^25) + 2 = 0 + 2 = 2              (−(2^25−1) ties to −2^25)
//	c=3: ((1 + 2^25) + 2) − 2^25 = 2^25 − 2^25 = 0
//
// l = 10 gives the uneven segments [0,2) [2,5) [5,7) [7,10).
func checkReduceOrder(s *Store) error {
	if s.World() != 4 {
		return fmt.Errorf("checkReduceOrder: %d ranks, its table is for 4", s.World())
	}
	orderInputs := [4]float32{1 << 25, 2, -(1 << 25), 1}
	want := []float32{1, 1, 4, 4, 4, 2, 2, 0, 0, 0}
	x := make([]float32, len(want))
	for i := range x {
		x[i] = orderInputs[s.Rank()]
	}
	if err := s.AllReduceFloat32("order", x); err != nil {
		return fmt.Errorf("AllReduceFloat32 (order): %w", err)
	}
	for i := range want {
		if math.Float32bits(x[i]) != math.Float32bits(want[i]) {
			return fmt.Errorf("AllReduceFloat32 (order): %v, want %v: not summed in the ring order", x, want)
		}
	}
	return nil
}

// scenarioCollectives: AllGather and AllReduceFloat32 between Add, Barrier
// and Free; a length mismatch; a tag mismatch; ErrClosed after Close.
func scenarioCollectives(w *worker) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	defer s.Close()
	if err := checkGather(s, 0); err != nil {
		return err
	}
	spec := varSpec{name: "coll", dt: Int64, rowBytes: 16, base: 5, emptyMember: -1}
	if err := addPattern(s, spec); err != nil {
		return err
	}
	if err := checkReduce(s, 4096); err != nil {
		return err
	}
	if err := s.Barrier(); err != nil {
		return err
	}
	if err := checkGather(s, 1); err != nil {
		return err
	}
	if err := s.Free(spec.name); err != nil {
		return err
	}
	if err := checkReduce(s, 0); err != nil {
		return err
	}

	// Different lengths: every rank fails with ErrMismatch, x untouched,
	// and the store goes on working.
	n := 8
	if s.Rank() == 1 {
		n = 9
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
	}
	err = s.AllReduceFloat32("len", x)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "rank 1") {
		return fmt.Errorf("AllReduceFloat32 with rank 1 passing 9 elements: got %v, want ErrMismatch naming rank 1", err)
	}
	for i, v := range x {
		if v != float32(i) {
			return fmt.Errorf("failed AllReduceFloat32 changed x[%d] to %v", i, v)
		}
	}
	if err := checkReduce(s, 1000); err != nil {
		return fmt.Errorf("after the mismatch: %w", err)
	}

	// Different tags: ErrMismatch on every rank. The exchange is then
	// broken: Close skips its barrier, releases everything and succeeds.
	tag := "same"
	if s.Rank() == 2 {
		tag = "other"
	}
	_, err = s.AllGather(tag, []byte{byte(s.Rank())})
	if !errors.Is(err, ErrMismatch) {
		return fmt.Errorf("AllGather with rank 2 passing another tag: got %v, want ErrMismatch", err)
	}
	w.logf("tag mismatch: %v", err)
	if cerr := s.Close(); cerr != nil {
		return fmt.Errorf("Close after a broken exchange: %v, want nil", cerr)
	}
	if _, err := s.AllGather("late", nil); !errors.Is(err, ErrClosed) {
		return fmt.Errorf("AllGather after Close: got %v, want ErrClosed", err)
	}
	if err := s.AllReduceFloat32("late", []float32{1}); !errors.Is(err, ErrClosed) {
		return fmt.Errorf("AllReduceFloat32 after Close: got %v, want ErrClosed", err)
	}
	return nil
}
