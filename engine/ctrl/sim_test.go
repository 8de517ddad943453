package ctrl

// The simulation harness: a host runs the ranks of a range of nodes of
// one job in this process, every rank the real control plane over real
// sockets (TCP on loopback between agents, unix sockets inside a node).
// The scale test drives several hosts, each a re-executed test binary,
// because one process may hold at most 20 000 descriptors here.

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var jobSeq atomic.Int64

// layout: rank r lives on node r/ppn as local rank r%ppn.
type layout struct{ world, ppn, nodes int }

func newLayout(world, ppn int) layout { return layout{world, ppn, (world + ppn - 1) / ppn} }

func (l layout) ranksOf(node int) (lo, hi int) { return node * l.ppn, min((node+1)*l.ppn, l.world) }

// blobOf is rank r's table entry: a pattern derived from r.
func blobOf(r int) []byte {
	b := make([]byte, 24)
	for i := range b {
		b[i] = byte(r*31 + i*7 + r>>8)
	}
	binary.LittleEndian.PutUint32(b, uint32(r))
	return b
}

// host runs the ranks of nodes [n0, n1).
type host struct {
	lay    layout
	job    string
	n0, n1 int
	lns    []net.Listener // agents' listeners, by node - n0
	ctrls  []*Ctrl        // by rank - lo
	lo, hi int
	tune   func(*Options)
}

func newHost(lay layout, job string, n0, n1 int, tune func(*Options)) (*host, []string, error) {
	h := &host{lay: lay, job: job, n0: n0, n1: n1, tune: tune}
	h.lo, _ = lay.ranksOf(n0)
	_, h.hi = lay.ranksOf(n1 - 1)
	var addrs []string
	for n := n0; n < n1; n++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			h.closeListeners()
			return nil, nil, err
		}
		h.lns = append(h.lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	h.ctrls = make([]*Ctrl, h.hi-h.lo)
	return h, addrs, nil
}

func (h *host) closeListeners() {
	for _, ln := range h.lns {
		ln.Close()
	}
}

func (h *host) options(r int, agents []string) Options {
	node := r / h.lay.ppn
	lo, hi := h.lay.ranksOf(node)
	o := Options{Rank: r, World: h.lay.world, Node: node, Nodes: h.lay.nodes, LocalRank: r - lo, LocalSize: hi - lo,
		Job: h.job, Token: "tok-" + h.job, Agents: agents, Blob: blobOf(r)}
	if r == lo {
		o.Listener = h.lns[node-h.n0]
	}
	if h.tune != nil {
		h.tune(&o)
	}
	return o
}

// start starts every rank of the host at once; skip lists ranks not to
// start. It returns the first error per rank.
func (h *host) start(agents []string, skip map[int]bool) []error {
	errs := make([]error, h.hi-h.lo)
	var wg sync.WaitGroup
	for r := h.lo; r < h.hi; r++ {
		if skip[r] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Start(h.options(r, agents))
			h.ctrls[r-h.lo], errs[r-h.lo] = c, err
		}()
	}
	wg.Wait()
	return errs
}

// each runs f on every live rank of the host at once and returns the
// errors by rank - lo.
func (h *host) each(f func(c *Ctrl) error) []error {
	errs := make([]error, len(h.ctrls))
	var wg sync.WaitGroup
	for i, c := range h.ctrls {
		if c == nil || c.killed.Load() {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(c) }()
	}
	wg.Wait()
	return errs
}

func (h *host) close() {
	var wg sync.WaitGroup
	for _, c := range h.ctrls {
		if c != nil {
			wg.Add(1)
			go func() { defer wg.Done(); c.Close() }()
		}
	}
	wg.Wait()
	h.closeListeners()
}

// checkTables verifies every agent's table entry by entry, and every
// plain rank's own entry and its agent's, against blobOf.
func (h *host) checkTables() error {
	for _, c := range h.ctrls {
		if c == nil {
			continue
		}
		t := c.Table()
		if t.Len() != h.lay.world {
			return fmt.Errorf("rank %d: table of %d ranks, want %d", c.Rank(), t.Len(), h.lay.world)
		}
		check := []int{c.Rank(), c.Rank() - c.o.LocalRank}
		if c.Agent() {
			check = check[:0]
			for r := 0; r < h.lay.world; r++ {
				check = append(check, r)
			}
		}
		for _, r := range check {
			if string(t.Blob(r)) != string(blobOf(r)) || t.Node(r) != r/h.lay.ppn || t.Local(r) != r%h.lay.ppn {
				return fmt.Errorf("rank %d: table entry of rank %d wrong (node %d local %d)", c.Rank(), r, t.Node(r), t.Local(r))
			}
		}
	}
	return nil
}

// raiseFDs lifts the descriptor limit to the hard limit.
func raiseFDs(t testing.TB) uint64 {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	l.Cur = l.Max
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	return l.Max
}

// cluster is every rank of a job in this process.
type cluster struct {
	*host
	agents []string
}

func startCluster(t testing.TB, world, ppn int, tune func(*Options), skip map[int]bool) (*cluster, []error) {
	t.Helper()
	raiseFDs(t)
	lay := newLayout(world, ppn)
	job := fmt.Sprintf("t%d-%d", os.Getpid(), jobSeq.Add(1))
	h, addrs, err := newHost(lay, job, 0, lay.nodes, tune)
	if err != nil {
		t.Fatal(err)
	}
	errs := h.start(addrs, skip)
	cl := &cluster{host: h, agents: addrs}
	t.Cleanup(func() { cl.close() })
	return cl, errs
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (cl *cluster) rank(r int) *Ctrl { return cl.ctrls[r-cl.lo] }

var _ = time.Second
