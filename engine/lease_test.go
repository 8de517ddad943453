package engine

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
	"unsafe"
)

// checkLoaderBatch checks every img and lab value of b against the
// pattern of its global row.
func checkLoaderBatch(b *Batch, what string) error {
	for k, g := range b.Indices {
		for j := range imgElems {
			f := math.Float32frombits(binary.LittleEndian.Uint32(b.Data[0][(k*imgElems+j)*4:]))
			if f != imgVal(g, j) {
				return fmt.Errorf("%s: batch %d img row %d elem %d = %v, want %v", what, b.Number, g, j, f, imgVal(g, j))
			}
		}
		if got := int64(binary.LittleEndian.Uint64(b.Data[1][k*8:])); got != g*7+1 {
			return fmt.Errorf("%s: batch %d lab row %d = %d, want %d", what, b.Number, g, got, g*7+1)
		}
	}
	return nil
}

// bufAddr is the address of a batch's first buffer.
func bufAddr(b *Batch) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b.bufs[0]))) }

// leaseChecks (run by every rank of TestLoaderMultiRank): batch buffers
// live off the Go heap; a leased batch (Retain/Release) is never reused
// while held and is reused once released; NextWithin waits in slices
// without losing the batch; EpochIndices serves a user sampler's order.
func leaseChecks(s *Store, global int64, rank int) error {
	const batch = 5
	l, err := s.NewLoader(LoaderOptions{Vars: []string{"img", "lab"}, BatchSize: batch, Seed: 9, Shuffle: true,
		Workers: 1, Prefetch: 2, BatchGet: true, FastCollate: true, ThreadReaders: true})
	if err != nil {
		return err
	}
	defer l.Close()
	e, err := l.Epoch(0)
	if err != nil {
		return err
	}
	held, err := e.Next()
	if err != nil {
		return err
	}
	if held.mem == nil || len(held.mem.Bytes()) < batch*(imgElems*4+8) {
		return fmt.Errorf("batch buffers not in an off-heap region")
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(held.mem.Bytes())))
	for v, d := range held.Data {
		a := uintptr(unsafe.Pointer(unsafe.SliceData(d)))
		if a < lo || a+uintptr(len(d)) > lo+uintptr(len(held.mem.Bytes())) || a%batchAlign != 0 {
			return fmt.Errorf("variable %d's data at %#x is outside its batch region [%#x,+%d) or unaligned", v, a, lo, len(held.mem.Bytes()))
		}
	}
	held.Retain()
	held.Release() // one of two references
	if held.Refs() != 1 {
		return fmt.Errorf("after Retain+Release: %d refs, want 1", held.Refs())
	}
	heldAddr := bufAddr(held)
	seen := map[uintptr]bool{}
	for {
		b, err := e.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if bufAddr(b) == heldAddr {
			return fmt.Errorf("batch %d reuses the buffer of held batch %d", b.Number, held.Number)
		}
		seen[bufAddr(b)] = true
		if err := checkLoaderBatch(b, "lease"); err != nil {
			return err
		}
		b.Release()
	}
	// The held batch still holds its own rows after the whole epoch.
	if err := checkLoaderBatch(held, "held batch"); err != nil {
		return err
	}
	if len(seen) > l.PoolSize() {
		return fmt.Errorf("%d distinct buffers for released batches, pool holds %d", len(seen), l.PoolSize())
	}
	held.Release()
	held.Release() // no reference left: a no-op
	if held.Refs() != 0 {
		return fmt.Errorf("released batch has %d refs", held.Refs())
	}
	// Released, its buffer is reused within a pool's worth of batches.
	e, err = l.Epoch(1)
	if err != nil {
		return err
	}
	reused := false
	for i := 0; i < l.PoolSize()+1 && i < e.Len(); i++ {
		b, err := e.Next()
		if err != nil {
			return err
		}
		reused = reused || bufAddr(b) == heldAddr
		if err := checkLoaderBatch(b, "reuse"); err != nil {
			return err
		}
		b.Release()
	}
	if !reused {
		return fmt.Errorf("the released batch's buffer was not reused")
	}

	// NextWithin: a stalled batch gives ErrNotReady per slice, then arrives.
	l2, err := s.NewLoader(LoaderOptions{Vars: []string{"img", "lab"}, BatchSize: batch, Seed: 3, Shuffle: true,
		Workers: 1, Prefetch: 1, BatchGet: true, FastCollate: true, ThreadReaders: true, Timeout: 20 * time.Second})
	if err != nil {
		return err
	}
	defer l2.Close()
	// The batch stalls until NextWithin has said "not ready" three times
	// (a minute at most), whatever the load.
	release := make(chan struct{})
	defer func() {
		if release != nil {
			close(release)
		}
	}()
	l2.readers[0] = slowAt{l2.readers[0], sampler(global, loaderWorld, rank, 3, 0, true, false)[batch], time.Minute, release}
	e2, err := l2.Epoch(0)
	if err != nil {
		return err
	}
	notReady := 0
	for n := 0; n < 2; {
		b, err := e2.NextWithin(20 * time.Millisecond)
		if errors.Is(err, ErrNotReady) {
			if notReady++; notReady == 3 {
				close(release)
				release = nil
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("NextWithin: %w", err)
		}
		if b.Number != n {
			return fmt.Errorf("NextWithin delivered batch %d, want %d", b.Number, n)
		}
		if err := checkLoaderBatch(b, "NextWithin"); err != nil {
			return err
		}
		b.Release()
		n++
	}
	if notReady < 3 {
		return fmt.Errorf("NextWithin(20ms) on a stalled batch: %d ErrNotReady, want several", notReady)
	}

	// A user sampler's order, duplicates and all.
	order := []int64{global - 1, 0, 3, 3, global / 2, 1, 2, global - 2, 5, 4, 7}
	e3, err := l.EpochIndices(2, order)
	if err != nil {
		return err
	}
	var got []int64
	for {
		b, err := e3.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := checkLoaderBatch(b, "EpochIndices"); err != nil {
			return err
		}
		got = append(got, b.Indices...)
		b.Release()
	}
	if !slices.Equal(got, order) {
		return fmt.Errorf("EpochIndices served %v, want %v", got, order)
	}
	if _, err := l.EpochIndices(3, []int64{0, global}); !errors.Is(err, ErrIndex) || !errors.Is(err, ErrLoader) {
		return fmt.Errorf("EpochIndices with row %d of %d: %v, want ErrIndex", global, global, err)
	}
	// A batch released after Loader.Close frees its memory (nothing pooled).
	e4, err := l.Epoch(4)
	if err != nil {
		return err
	}
	late, err := e4.Next()
	if err != nil {
		return err
	}
	if err := l.Close(); err != nil {
		return err
	}
	if err := checkLoaderBatch(late, "after Loader.Close"); err != nil {
		return err
	}
	late.Release()
	if late.mem != nil {
		return fmt.Errorf("batch released after Loader.Close kept its memory")
	}
	return nil
}
