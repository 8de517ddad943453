package ctrl

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Ctrl is one rank's control plane.
type Ctrl struct {
	o     Options
	start time.Time

	tcpLn  net.Listener
	unixLn *net.UnixListener

	mu      sync.Mutex
	agents  map[int]*link // primary link per node
	extra   []*link       // further links (a probe's, a crossed dial)
	locals  map[int]*link // by rank
	linkCh  chan struct{} // closed and replaced when a link registers
	dialing map[int]bool
	up      *link // a plain rank's link to its agent
	table   *Table
	agentOf atomic.Pointer[[]int32] // agent rank by node (agents, once the table is there)
	tabled  atomic.Bool             // the table is there (an agent watches its ranks' silence from then on)

	mbMu sync.Mutex
	mb   map[mkey]msg
	wake chan struct{}

	tellMu sync.Mutex // held across OnDead (tellOnce)
	told   bitset     // ranks OnDead ran for (under tellMu)

	deadMu       sync.Mutex
	dead         bitset // ranks
	nodeDead     bitset // nodes whose agent is dead
	nodeLeft     bitset // nodes whose agent closed cleanly
	deadN        int
	deadList     []int
	deadDone     []uint64 // deadList's done (learnDead)
	minDone      uint64   // the least done of every dead rank
	deadCause    error
	aborted      error
	abortNote    abortNote // the first abort learnt (aborted)
	abortSeen    map[int]bool
	abortFlooded map[uint64]bool // collectives whose abort this rank spread
	firstDead    atomic.Int64    // unix ns when this rank first learned of a death
	marked       atomic.Bool     // a death only this rank knows (MarkDead)

	collMu sync.Mutex
	seq    uint64
	began  atomic.Uint64 // seq, for the read loops (linkLost)
	broken error

	live liveState

	scratch  *scratch  // the node's shared all-reduce memory (ring.go); nil if none
	ringAcc  []float32 // an agent's ring all-reduce result, reused (collMu)
	blocks   []int     // blockBounds' answer (once the table is there)
	blocksOK sync.Once
	freeMu   sync.Mutex
	free     [][]byte // recycled frame bodies (recycle)

	nHB, nAgentMsg, nLocalMsg atomic.Uint64
	rounds                    atomic.Int32

	closing atomic.Bool
	killed  atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup
	bg      sync.WaitGroup // floods and aborts in flight (started by goBg)
	bgMu    sync.Mutex     // orders goBg's Add before Close's Wait
	bgShut  bool           // Close began: goBg starts nothing more
	pause   sync.RWMutex
}

type mkey struct {
	seq   uint64
	step  uint16
	from  int32
	local bool
}

type msg struct {
	body []byte
	hops uint8
	tag  uint32
}

type bitset []uint64

func newBitset(n int) bitset    { return make(bitset, (n+63)/64) }
func (b bitset) has(i int) bool { return i >= 0 && i/64 < len(b) && b[i/64]&(1<<(i%64)) != 0 }
func (b bitset) set(i int)      { b[i/64] |= 1 << (i % 64) }

// Bootstrap steps (mailbox keys of sequence 0).
const (
	stGather = 1
	stTable  = 2
)

// Start joins the job: it connects this rank (an agent to its tree
// parent, a plain rank to its agent), takes part in the table's gather and
// broadcast, and starts liveness. It returns once this rank holds the
// table, or an error naming the ranks missing at the deadline.
func Start(o Options) (*Ctrl, error) {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c := &Ctrl{o: o, start: time.Now(), agents: map[int]*link{}, locals: map[int]*link{}, linkCh: make(chan struct{}),
		dialing: map[int]bool{}, mb: map[mkey]msg{}, wake: make(chan struct{}, 1), dead: newBitset(o.World),
		told: newBitset(o.World), nodeDead: newBitset(o.Nodes), nodeLeft: newBitset(o.Nodes), abortSeen: map[int]bool{},
		abortFlooded: map[uint64]bool{}, stop: make(chan struct{})}
	c.live.target, c.live.probes = -1, map[int][]*link{}
	deadline := c.start.Add(o.Timeout)
	var err error
	if o.agent() {
		err = c.startAgent(deadline)
	} else {
		err = c.startPlain(deadline)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	if o.agent() {
		c.wg.Add(1)
		go c.watch()
	} else {
		c.wg.Add(1)
		go c.heartbeat()
	}
	return c, nil
}

// Table is the job's table (every rank's blob).
func (c *Ctrl) Table() *Table { return c.table }

// Rank is this rank.
func (c *Ctrl) Rank() int { return c.o.Rank }

// Size is the number of ranks.
func (c *Ctrl) Size() int { return c.o.World }

// Agent reports whether this rank is its node's agent.
func (c *Ctrl) Agent() bool { return c.o.agent() }

// Stats are counters of this rank's control plane.
type Stats struct {
	Conns      int    // control connections held
	HBSent     uint64 // liveness messages sent (pings, pongs, heartbeats, probes)
	AgentMsgs  uint64 // collective messages sent to other agents
	LocalMsgs  uint64 // collective messages sent inside the node
	Rounds     int    // agent-to-agent messages on the critical path of the last collective
	TableBytes int
}

// Stats returns the counters.
func (c *Ctrl) Stats() Stats {
	c.mu.Lock()
	n := len(c.agents) + len(c.extra) + len(c.locals)
	if c.up != nil {
		n++
	}
	c.mu.Unlock()
	s := Stats{Conns: n, HBSent: c.nHB.Load(), AgentMsgs: c.nAgentMsg.Load(), LocalMsgs: c.nLocalMsg.Load(), Rounds: int(c.rounds.Load())}
	if c.table != nil {
		s.TableBytes = c.table.Bytes()
	}
	return s
}

func (c *Ctrl) allLinks() []*link {
	c.mu.Lock()
	defer c.mu.Unlock()
	ls := make([]*link, 0, len(c.agents)+len(c.extra)+len(c.locals)+1)
	for _, l := range c.agents {
		ls = append(ls, l)
	}
	ls = append(ls, c.extra...)
	for _, l := range c.locals {
		ls = append(ls, l)
	}
	if c.up != nil {
		ls = append(ls, c.up)
	}
	return ls
}

// Close says goodbye on every link and stops the control plane.
func (c *Ctrl) Close() error {
	if c.closing.Swap(true) || c.killed.Load() {
		return nil
	}
	c.stopBg()
	c.bg.Wait()
	for _, l := range c.allLinks() {
		l.send(header{typ: tBye}, nil, time.Now().Add(time.Second))
	}
	c.shutdown()
	return nil
}

// kill stops this rank as a crash would: no goodbye (tests, failed Start).
func (c *Ctrl) kill() {
	if c.killed.Swap(true) {
		return
	}
	c.shutdown()
}

// goBg runs f in the background unless Close has begun: Close waits for
// what runs, and a WaitGroup Add that races its Wait is a data race.
func (c *Ctrl) goBg(f func()) {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.bgShut {
		return
	}
	c.bg.Add(1)
	go func() { defer c.bg.Done(); f() }()
}

// stopBg makes goBg start nothing more (before bg.Wait).
func (c *Ctrl) stopBg() {
	c.bgMu.Lock()
	c.bgShut = true
	c.bgMu.Unlock()
}

func (c *Ctrl) shutdown() {
	c.stopBg()
	c.mu.Lock() // no register after this (it checks the flags under mu)
	c.mu.Unlock()
	if c.tcpLn != nil {
		c.tcpLn.Close()
	}
	if c.unixLn != nil {
		c.unixLn.Close()
	}
	for _, l := range c.allLinks() {
		l.conn.Close()
	}
	close(c.stop)
	c.wg.Wait()
	c.bg.Wait()
	c.table.close()
	c.scratch.close()
}

// pauseFor stops this rank's control goroutines for d, as SIGSTOP would
// (tests).
func (c *Ctrl) pauseFor(d time.Duration) {
	c.pause.Lock()
	time.Sleep(d)
	c.pause.Unlock()
}
