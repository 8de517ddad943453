package ctrl

import (
	"fmt"
	"net"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// Defaults.
const (
	DefaultArity        = 16 // 32 puts agent 1 of 10 000 ranks (8 per node) at 52 links; 16 keeps it at 36
	DefaultTimeout      = 60 * time.Second
	DefaultPeriod       = time.Second
	DefaultSuspectAfter = 2 * time.Second
	DefaultDeadAfter    = 3600 * time.Millisecond
	DefaultProbes       = 3
	DefaultSmallBytes   = 64 << 10
	DefaultMaxAccepts   = 64
)

// Options configures one rank's control plane. The zero value of every
// tuning field means its default (EnsureDefaults).
type Options struct {
	Rank, World int
	// Node is this rank's node (0..Nodes-1); LocalRank its place among the
	// LocalSize ranks of that node. LocalRank 0 is the node's agent.
	Node, Nodes          int
	LocalRank, LocalSize int
	// Job names the node-local sockets; equal on every rank of one job and
	// distinct between jobs on one machine.
	Job string
	// Token must be equal on every rank; a hello with another is refused.
	Token string
	// Agents are the agents' TCP addresses, by node (from the launcher's
	// exchange, or the node list and a fixed port). Only agents read it.
	Agents []string
	// Listener, when set, is the agent's already open TCP listener (its
	// address is Agents[Node]); else the agent listens on Agents[Node].
	Listener net.Listener
	// Blob is this rank's entry in the table that Start returns.
	Blob []byte
	// Arity of the agents' tree (default 16).
	Arity int
	// Timeout bounds Start and is the default deadline of collectives.
	Timeout time.Duration
	// Period between an agent's pings of its ring successor. SuspectAfter
	// without an answer starts the indirect probes; DeadAfter declares the
	// node dead.
	Period, SuspectAfter, DeadAfter time.Duration
	// LocalDeadAfter (default DeadAfter) is how long an agent bears the
	// silence of one of its node's plain ranks (frozen, its socket still
	// open; an exit is its socket's EOF, at once). The rank tells its
	// agent it lives every min(Period, LocalDeadAfter/8) and is dead after
	// LocalDeadAfter and that silent (LocalTiming). The store sets it to
	// its liveness, longer than the ring's: a silent node is confirmed
	// through other agents' probes, a silent rank only by its agent.
	LocalDeadAfter time.Duration
	// Probes is the number of agents asked to probe a suspect (SWIM's k).
	Probes int
	// SmallBytes: all-reduces up to this size use recursive doubling,
	// larger ones a reduce-scatter and an all-gather.
	SmallBytes int
	// MaxAccepts bounds the handshakes an agent runs at once; further
	// connections wait in the listen backlog.
	MaxAccepts int
	// OnDead runs once per rank found dead, from a control goroutine.
	OnDead func(rank int, cause error)
	// Handshake, when set, runs first on every new control connection
	// (initiator: this side dialled); an error refuses the connection.
	Handshake func(c net.Conn, initiator bool) error
}

// EnsureDefaults fills the zero tuning fields with their defaults.
func (o *Options) EnsureDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.Timeout, DefaultTimeout)
	def(&o.Period, DefaultPeriod)
	def(&o.SuspectAfter, DefaultSuspectAfter)
	def(&o.DeadAfter, DefaultDeadAfter)
	def(&o.LocalDeadAfter, o.DeadAfter)
	if o.Arity == 0 {
		o.Arity = DefaultArity
	}
	if o.Probes == 0 {
		o.Probes = DefaultProbes
	}
	if o.SmallBytes == 0 {
		o.SmallBytes = DefaultSmallBytes
	}
	if o.MaxAccepts == 0 {
		o.MaxAccepts = DefaultMaxAccepts
	}
	if o.Nodes == 0 && o.World == 1 {
		o.Nodes, o.LocalSize = 1, 1
	}
}

// Validate reports the first inconsistent option.
func (o *Options) Validate() error {
	bad := func(f string, a ...any) error { return fault.New(fault.ErrInvalid, "ctrl options", f, a...) }
	switch {
	case o.World < 1 || o.Rank < 0 || o.Rank >= o.World:
		return bad("rank %d of world %d", o.Rank, o.World)
	case o.Nodes < 1 || o.Nodes > o.World || o.Node < 0 || o.Node >= o.Nodes:
		return bad("node %d of %d nodes in a world of %d", o.Node, o.Nodes, o.World)
	case o.LocalSize < 1 || o.LocalRank < 0 || o.LocalRank >= o.LocalSize:
		return bad("local rank %d of %d", o.LocalRank, o.LocalSize)
	case o.Arity < 1:
		return bad("tree arity %d", o.Arity)
	case o.Period <= 0 || o.SuspectAfter < o.Period || o.DeadAfter <= o.SuspectAfter:
		return bad("liveness periods must grow: period %v, suspect after %v, dead after %v", o.Period, o.SuspectAfter, o.DeadAfter)
	case o.LocalDeadAfter <= 0:
		return bad("local dead-after %v", o.LocalDeadAfter)
	case o.Job == "":
		return bad("empty job name (it names the node-local sockets)")
	case len(o.Blob) > maxBlob:
		return bad("blob of %d bytes (limit %d)", len(o.Blob), maxBlob)
	case o.LocalRank == 0 && o.Nodes > 1 && len(o.Agents) != o.Nodes:
		return bad("%d agent addresses for %d nodes", len(o.Agents), o.Nodes)
	}
	return nil
}

func (o *Options) agent() bool { return o.LocalRank == 0 }

func (o *Options) unixName(node int) string {
	return fmt.Sprintf("@ddstore-ctrl-%s-%d", o.Job, node)
}
