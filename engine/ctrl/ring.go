package ctrl

// AllReduceRingOrder: an all-reduce whose sums have the order of a ring
// all-reduce (engine/mesh's), so that a job gets the same bits whichever
// control plane it runs. On one node the ranks sum through shared memory
// (a memfd that the agent hands out with the table); across nodes they
// gather every rank's vector; past ExactBytes they fall back to
// AllReduceFloat32's tree order.

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/fault"
)

// ScratchBytes is the largest vector, in bytes, that the one-node path
// takes (each rank's slot of the node's scratch memfd, which is sparse:
// only pages used are allocated).
var ScratchBytes = 8 << 20

// ExactBytes bounds world × vector bytes of the gathering path; larger
// all-reduces across nodes run AllReduceFloat32 (same bits on every rank,
// tree order).
var ExactBytes = 64 << 20

// scratch is a node's shared memory for AllReduceRingOrder: slot r holds
// rank r's vector, the last slot the result (rank c writes segment c).
type scratch struct {
	mem  []byte
	slot int
	n    int
}

func (s *scratch) close() {
	if s != nil && s.mem != nil {
		unix.Munmap(s.mem)
		s.mem = nil
	}
}

func (s *scratch) f32(i, n int) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(&s.mem[i*s.slot])), n)
}

// newScratch creates and maps the node's scratch (agent of a one-node
// job) and returns its fd, to send to the local ranks.
func (c *Ctrl) newScratch() (int, error) {
	n := c.o.LocalSize
	fd, err := unix.MemfdCreate("ddstore-ctrl-scratch", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	if err := unix.Ftruncate(fd, int64((n+1)*ScratchBytes)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if !c.mapScratch(fd) {
		unix.Close(fd)
		return -1, fmt.Errorf("ctrl: cannot map the scratch")
	}
	return fd, nil
}

// mapScratch maps a scratch memfd; false (and no scratch) on failure.
func (c *Ctrl) mapScratch(fd int) bool {
	var st unix.Stat_t
	n := c.o.LocalSize
	if unix.Fstat(fd, &st) != nil || st.Size <= 0 || int(st.Size)%(n+1) != 0 {
		return false
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return false
	}
	c.scratch = &scratch{mem: mem, slot: int(st.Size) / (n + 1), n: n}
	return true
}

// AllReduceRingOrder replaces x on every rank by the element-wise sum of
// every rank's x, summed as a ring all-reduce over the ranks does:
// element i of segment c (world equal parts of x) is
// ((x_c + x_{c+1}) + …) + x_{c−1}, ranks modulo the world. Every rank gets
// the same bits. Every rank must pass the same tag and length, else
// ErrMismatch names a rank that did not (the collectives go on working).
// It runs two collectives (callers serialise their collectives);
// on error x is unchanged.
func (c *Ctrl) AllReduceRingOrder(tag string, x []float32, timeout time.Duration) error {
	op := fmt.Sprintf("allreduce-f32 %q", tag)
	w, l := c.o.World, len(x)
	sc := c.scratch
	shm := sc != nil && c.o.Nodes == 1 && 4*l <= sc.slot
	if shm {
		// One node: x goes into this rank's slot before the length check,
		// which is then also the barrier after which every slot is full
		// (nobody reads the slots after the previous call's last barrier).
		copy(sc.f32(c.o.Rank, l), x)
	}
	var lb [8]byte
	binary.LittleEndian.PutUint64(lb[:], uint64(l))
	lens, err := c.AllGather("ring-len "+tag, lb[:], timeout)
	if err != nil {
		return err
	}
	for r, b := range lens {
		if got := binary.LittleEndian.Uint64(b); len(b) != 8 || got != uint64(l) {
			return &fault.Error{Op: op, Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrMismatch,
				Detail: fmt.Sprintf("rank %d passed %d float32, rank %d passed %d", r, got, c.o.Rank, l)}
		}
	}
	if l == 0 || w == 1 {
		return nil
	}
	switch {
	case shm:
		// Rank c sums segment c in ring order into the result slot; every
		// rank copies the result once all have.
		res := sc.f32(w, l)
		lo, hi := c.o.Rank*l/w, (c.o.Rank+1)*l/w
		copy(res[lo:hi], sc.f32(c.o.Rank, l)[lo:hi])
		for k := 1; k < w; k++ {
			in := sc.f32((c.o.Rank+k)%w, l)[lo:hi]
			out := res[lo:hi]
			for i := range out {
				out[i] += in[i]
			}
		}
		if err := c.Barrier("ring-out "+tag, timeout); err != nil {
			return err
		}
		copy(x, res)
		return nil
	case 4*l*w <= ExactBytes:
		blobs, err := c.AllGather("ring-parts "+tag, f32raw(x), timeout)
		if err != nil {
			return err
		}
		for r, b := range blobs {
			if len(b) != 4*l {
				return &fault.Error{Op: op, Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrMismatch,
					Detail: fmt.Sprintf("rank %d sent %d bytes for %d float32", r, len(b), l)}
			}
		}
		ringOrderSum(x, blobs)
		return nil
	}
	buf := append([]float32(nil), x...)
	if err := c.AllReduceFloat32(tag, buf, timeout); err != nil {
		return err
	}
	copy(x, buf)
	return nil
}

// ringOrderSum sets x to the element-wise sum of parts (by rank,
// little-endian float32) in ring order.
func ringOrderSum(x []float32, parts [][]byte) {
	w, l := len(parts), len(x)
	for c := range w {
		lo, hi := c*l/w, (c+1)*l/w
		for k := range w {
			p := parts[(c+k)%w]
			for i := lo; i < hi; i++ {
				v := math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
				if k == 0 {
					x[i] = v
				} else {
					x[i] += v
				}
			}
		}
	}
}

// f32raw encodes x little-endian.
func f32raw(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}
