package ctrl

// AllReduceRingOrder: an all-reduce whose sums have the order of a ring
// all-reduce (engine/mesh's), so that a job gets the same bits whichever
// control plane it runs. On one node the ranks sum through shared memory
// (a memfd that the agent hands out with the table). Across nodes, small
// vectors are gathered (log-depth) and summed by every rank; larger ones
// go round a pipelined ring of agents, each adding its node's ranks in
// rank order (its local ranks' vectors come through the same memfd). Ranks
// not numbered node by node gather up to ExactBytes and beyond fall back to
// AllReduceFloat32's tree order.

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
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
// all-reduces across nodes whose ranks are not numbered node by node run
// AllReduceFloat32 (same bits on every rank, tree order).
var ExactBytes = 64 << 20

// GatherBytes: across nodes numbered node by node (blockBounds), world ×
// vector bytes up to it are gathered (log-depth, for small vectors); larger
// all-reduces run the agents' pipelined ring (ringAllReduce).
var GatherBytes = 64 << 10

// GatherAlwaysBytes: vectors up to this size (bytes per rank) are always
// gathered across nodes, whatever the world: at 10 000 ranks an 8-byte
// all-reduce gathers 80 KB, where the agents' ring would take 2·nodes − 1
// sequential hops.
var GatherAlwaysBytes = 64

// RingPieceBytes is the unit of the agents' ring pipeline (as engine/mesh's
// PieceBytes).
var RingPieceBytes = 256 << 10

// scratch is a node's shared memory for AllReduceRingOrder: slot i holds
// local rank i's vector, the last slot the result (on one node, rank c
// writes segment c; across nodes, the agent writes it all).
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

// newScratch creates and maps the node's scratch (agent of a node of
// several ranks) and returns its fd, to send to the local ranks.
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
	shm := sc != nil && 4*l <= sc.slot
	if shm {
		// x goes into this rank's slot before the length check, which is
		// then also the barrier after which every slot is full (nobody
		// reads the slots after the previous call's last barrier, or
		// before the agent's ring ended).
		copy(sc.f32(c.o.LocalRank, l), x)
	}
	// Length, and whether the vector is in this rank's scratch slot: the
	// scratch is used where every rank of the node has it. A vector that
	// is gathered anyway (across nodes, small) rides along: one
	// collective, not two. Ranks that passed another length may decide
	// otherwise; the lengths then differ, and every rank fails on them.
	blocks := c.blockBounds()
	gather := gatherRingOrder(l, w, c.o.Nodes, blocks != nil)
	size := 9
	if gather {
		size += 4 * l
	}
	hdr := make([]byte, 9, size)
	binary.LittleEndian.PutUint64(hdr, uint64(l))
	if shm {
		hdr[8] = 1
	}
	if gather {
		hdr = appendF32(hdr, x)
	}
	heads, err := c.AllGather("ring-len "+tag, hdr, timeout)
	if err != nil {
		return err
	}
	for r, b := range heads {
		if len(b) != len(hdr) || binary.LittleEndian.Uint64(b) != uint64(l) {
			got := -1
			if len(b) >= 8 {
				got = int(binary.LittleEndian.Uint64(b))
			}
			return &fault.Error{Op: op, Ranks: []int{r}, Side: fault.Remote, Kind: fault.ErrMismatch,
				Detail: fmt.Sprintf("rank %d passed %d float32, rank %d passed %d", r, got, c.o.Rank, l)}
		}
		if b[8] == 0 && c.table.Node(r) == c.o.Node {
			shm = false
		}
		heads[r] = b[9:] // the vector, when gathered
	}
	if l == 0 || w == 1 {
		return nil
	}
	if gather {
		ringOrderSum(x, heads)
		return nil
	}
	switch {
	case shm && c.o.Nodes == 1:
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
	case blocks != nil && c.o.Nodes > 1 && 4*l*w > GatherBytes:
		return c.ringAllReduce(tag, x, shm, blocks, timeout)
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

// gatherRingOrder: an all-reduce of l float32 over w ranks on nodes nodes
// (numbered node by node: blocks) gathers every rank's vector in its
// length check, rather than going round the agents' ring or the node's
// shared memory.
func gatherRingOrder(l, w, nodes int, blocks bool) bool {
	if nodes == 1 || l == 0 || w == 1 || 4*l*w > ExactBytes {
		return false
	}
	return !blocks || 4*l*w <= GatherBytes || 4*l <= GatherAlwaysBytes
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
func f32raw(x []float32) []byte { return appendF32(make([]byte, 0, 4*len(x)), x) }

// appendF32 appends x, little-endian.
func appendF32(b []byte, x []float32) []byte {
	for _, v := range x {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// blockBounds is b with node j holding ranks [b[j], b[j+1]) in local-rank
// order, when the table numbers ranks node by node (as launchers' block
// placement does); nil otherwise.
func (c *Ctrl) blockBounds() []int {
	c.blocksOK.Do(func() { c.blocks = BlockBounds(c.o.World, c.o.Nodes, c.table.Node, c.table.Local) })
	return c.blocks
}

// BlockBounds is b with node j holding ranks [b[j], b[j+1]) (local rank
// r−b[j]) when node and local number the world's ranks node by node, nodes
// in ascending order; else nil.
func BlockBounds(world, nodes int, node, local func(r int) int) []int {
	b := make([]int, 0, nodes+1)
	for r := range world {
		n, lr := node(r), local(r)
		switch {
		case lr == 0 && n == len(b):
			b = append(b, r)
		case lr == 0 || len(b) == 0 || n != len(b)-1 || lr != r-b[n]:
			return nil
		}
	}
	if len(b) != nodes {
		return nil
	}
	return append(b, world)
}

// RingHops is the number of agents that node J's part of the vector
// (ranks b[J]..b[J+1]−1's segments) visits after node J's agent before its
// sum is complete: every other agent, then J's again when J has several
// ranks (segment c of J starts at rank c and ends with ranks b[J]..c−1).
func RingHops(b []int, J int) int {
	n := len(b) - 1
	if b[J+1]-b[J] > 1 {
		return n
	}
	return n - 1
}

// stRing is the first mailbox step of the agents' ring; the k-th message
// on a link is step stRing + k mod ringSteps.
const (
	stRing    = 128
	ringSteps = 1<<16 - stRing
)

// ringAllReduce is AllReduceRingOrder across nodes numbered in blocks: the
// local ranks' vectors reach the agent (through the scratch when shm, else
// as messages), the agents run the ring (ringAgents), and the result goes
// back down the same way. x holds the result on return; on error x is
// unchanged.
func (c *Ctrl) ringAllReduce(tag string, x []float32, shm bool, b []int, timeout time.Duration) error {
	c.collMu.Lock()
	defer c.collMu.Unlock()
	l := len(x)
	k, err := c.begin("allreduce-ring", tag, l, timeout)
	if err != nil {
		return err
	}
	var acc []float32
	var local [][]float32
	if c.o.agent() {
		if cap(c.ringAcc) < l {
			c.ringAcc = make([]float32, l)
		}
		acc = c.ringAcc[:l]
		local = make([][]float32, 1, c.o.LocalSize)
		local[0] = x
		if shm {
			for i := 1; i < c.o.LocalSize; i++ {
				local = append(local, c.scratch.f32(i, l))
			}
		}
	}
	var gather func(int, []byte) error
	if !shm && c.o.LocalSize > 1 {
		gather = func(from int, in []byte) error {
			if len(in) != 4*l {
				return c.mismatch(k.op, int32(from), true)
			}
			local = append(local, f32view(in))
			return nil
		}
	}
	var up []byte
	if !shm {
		up = f32bytes(x)
	}
	res, err := k.run(up, !shm, gather, func() ([]byte, error) {
		if len(local) != b[c.o.Node+1]-b[c.o.Node] {
			return nil, fault.New(fault.ErrCorrupt, k.op, "%d local vectors for %d local ranks", len(local), b[c.o.Node+1]-b[c.o.Node])
		}
		if err := k.ringAgents(acc, local, b); err != nil {
			return nil, err
		}
		if shm {
			copy(c.scratch.f32(c.o.LocalSize, l), acc)
			return []byte{}, nil
		}
		return f32bytes(acc), nil
	}, all)
	switch {
	case err != nil:
	case c.o.agent():
		copy(x, acc)
	case shm:
		copy(x, c.scratch.f32(c.o.LocalSize, l))
	case len(res) != 4*l:
		err = fault.New(fault.ErrMismatch, k.op, "result of %d bytes for %d float32", len(res), l)
	default:
		copy(f32bytes(x), res)
	}
	return k.end(err)
}

// ringAgents is the agents' ring: node J's part of the vector starts at
// J's agent (each of its segments c summed from rank c to J's last rank),
// goes right round the ring, every agent adding its ranks in rank order,
// back to J's agent for ranks b[J]..c−1 when J has several (RingHops),
// then on round once more, copied, until every agent holds it. Pieces of
// RingPieceBytes are forwarded as soon as they are summed. acc (length l)
// ends with the result; local are this node's vectors by local rank.
func (k *coll) ringAgents(acc []float32, local [][]float32, b []int) (err error) {
	c := k.c
	n, j, w, l := c.o.Nodes, c.o.Node, c.o.World, len(acc)
	right, left := (j+1)%n, (j+n-1)%n
	pf := max(1, RingPieceBytes/4)
	// A sender goroutine forwards the pieces in order, so that receiving
	// and summing the next piece overlaps the write of this one. A piece
	// of acc is not written again before it is sent: its next value comes
	// round the ring from this very send.
	sendq := make(chan [2]int, 2*((l+pf-1)/pf+n)+2) // never full
	sendErr := make(chan error, 1)
	var stop atomic.Bool
	// sent counts the queued pieces the sender is done with (sent, or
	// passed over after an error); a piece of acc is overwritten only
	// once its last send is done. The value that overwrites it came
	// round the ring from that send, so this never waits in practice,
	// but the kernel's ordering is invisible to the race detector.
	var sent atomic.Int64
	sentSig := make(chan struct{}, 1)
	queued, lastSend := int64(0), map[int]int64{}
	round := k.hops + 1 // the ring counts as one round (Stats.Rounds)
	go func() {
		var err error
		step := 0
		for pc := range sendq {
			if err == nil && !stop.Load() {
				err = k.sendAgentHops(right, stRing+step%ringSteps, f32bytes(acc[pc[0]:pc[1]]), round)
				step++
			}
			sent.Add(1)
			select {
			case sentSig <- struct{}{}:
			default:
			}
		}
		sendErr <- err
	}()
	defer func() {
		if err != nil {
			// Failed (a death, an abort): the collectives are broken, so
			// nothing reuses acc; a send stuck on a frozen peer is not
			// waited for (it ends by its deadline or at Close).
			stop.Store(true)
			close(sendq)
			return
		}
		close(sendq)
		err = <-sendErr
	}()
	got := 0
	for p := 0; p < 2*n; p++ {
		J := ((j-p)%n + n) % n
		hops := RingHops(b, J)
		if p > hops+n-1 {
			continue
		}
		lo, hi := b[J]*l/w, b[J+1]*l/w
		for q := lo; q < hi; q += pf {
			e := min(q+pf, hi)
			if p == 0 {
				// Own part: segment s from rank s to this node's last.
				for s := b[j]; s < b[j+1]; s++ {
					slo, shi := max(q, s*l/w), min(e, (s+1)*l/w)
					if slo >= shi {
						continue
					}
					out := acc[slo:shi]
					copy(out, local[s-b[j]][slo:shi])
					for _, v := range local[s-b[j]+1:] {
						addF32(out, v[slo:shi])
					}
				}
			} else {
				in, err := k.recvAgent(left, stRing+got%ringSteps)
				got++
				if err == nil && len(in) != 4*(e-q) {
					err = c.mismatch(k.op, int32(left), false)
				}
				if err != nil {
					return err
				}
				for sent.Load() < lastSend[q] {
					<-sentSig
				}
				out := acc[q:e]
				switch {
				case p < n: // another node's part: add every local rank
					sumF32(out, f32view(in), local[0][q:e])
					for _, v := range local[1:] {
						addF32(out, v[q:e])
					}
				case p == hops: // own part back: ranks b[j]..s−1 for segment s
					copy(out, f32view(in))
					for s := b[j] + 1; s < b[j+1]; s++ {
						slo, shi := max(q, s*l/w), min(e, (s+1)*l/w)
						for _, v := range local[:s-b[j]] {
							if slo < shi {
								addF32(acc[slo:shi], v[slo:shi])
							}
						}
					}
				default:
					copy(out, f32view(in))
				}
				c.recycle(in)
			}
			if p < hops+n-1 {
				queued++
				lastSend[q] = queued
				sendq <- [2]int{q, e}
			}
		}
	}
	return nil
}

// sumF32 sets out to a + b element-wise.
func sumF32(out, a, b []float32) {
	a, b = a[:len(out)], b[:len(out)]
	for i := range out {
		out[i] = a[i] + b[i]
	}
}

// addF32 adds in to out element-wise (out[i] = out[i] + in[i]).
func addF32(out, in []float32) {
	in = in[:len(out)]
	for i := range out {
		out[i] += in[i]
	}
}
