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

	"github.com/ddstore/ddstore/engine/mesh"
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

// reduceInput is rank r's element i: magnitudes from 1e-3 to 1e7 with
// both signs, so that a sum in another order gives other bits.
func reduceInput(r, i int) float32 {
	h := splitmix64(uint64(r)<<32 | uint64(i))
	v := float32(h>>40) / (1 << 24) // [0, 1)
	v *= float32(math.Pow(10, float64(int(h%11)-3)))
	if h&(1<<20) != 0 {
		v = -v
	}
	return v
}

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

func checkReduce(s *Store, n int) error {
	x := make([]float32, n)
	for i := range x {
		x[i] = reduceInput(s.Rank(), i)
	}
	if err := s.AllReduceFloat32("sum", x); err != nil {
		return fmt.Errorf("AllReduceFloat32: %w", err)
	}
	orderMatters := 0
	w := s.World()
	for i := range x {
		// The ring's fixed order: ((x_c + x_{c+1}) + …) + x_{c−1}.
		c := mesh.SumStart(i, w, n)
		want := reduceInput(c, i)
		for k := 1; k < w; k++ {
			want += reduceInput((c+k)%w, i)
		}
		if math.Float32bits(x[i]) != math.Float32bits(want) {
			return fmt.Errorf("AllReduceFloat32: element %d = %v (%#x), want the ring-order sum from rank %d %v (%#x)",
				i, x[i], math.Float32bits(x[i]), c, want, math.Float32bits(want))
		}
		var rev float32
		for k := w - 1; k >= 0; k-- {
			rev += reduceInput((c+k)%w, i)
		}
		if rev != want {
			orderMatters++
		}
	}
	if n >= 1000 && orderMatters == 0 {
		return errors.New("test inputs do not tell the summation orders apart")
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
