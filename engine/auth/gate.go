package auth

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Gate defaults.
const (
	DefaultGateTimeout = 5 * time.Second
	DefaultGateMax     = 64
)

// Gate stands at a listener: it runs Handshake on every accepted
// connection, at most Max at a time and each within Timeout, and logs the
// peers it refuses with their address (the first 16, then one line per
// 256). A connection that finds the gate full is closed at once: a flood of
// strangers costs a bounded number of goroutines and buffers, and a rank of
// the job, which retries its dial, gets in once the flood's handshakes time
// out. The zero value is not usable: use NewGate.
type Gate struct {
	name    string
	secret  []byte
	timeout time.Duration
	sem     chan struct{}
	wg      sync.WaitGroup

	refused  atomic.Int64
	admitted atomic.Int64

	// OnRefuse, when set before the first Go, is told of every refusal
	// too (a listener that reports its refusals in a timeout's error).
	OnRefuse func(addr net.Addr, err error)
}

// NewGate is a gate for the listener called name (in log lines), checking
// secret; timeout ≤ 0 and max ≤ 0 mean the defaults.
func NewGate(name string, secret []byte, timeout time.Duration, max int) *Gate {
	if timeout <= 0 {
		timeout = DefaultGateTimeout
	}
	if max <= 0 {
		max = DefaultGateMax
	}
	return &Gate{name: name, secret: secret, timeout: timeout, sem: make(chan struct{}, max)}
}

// Go authenticates c (the responder's side) on a goroutine of its own and,
// if the peer proves the secret, calls then(c) on it; otherwise it closes c
// and logs the refusal. then runs while c still holds its place in the
// gate, so it must itself be bounded in time (it reads the protocol's
// hello under a deadline, typically). Go never blocks.
func (g *Gate) Go(c net.Conn, then func(c net.Conn)) {
	select {
	case g.sem <- struct{}{}:
	default:
		c.Close()
		g.Refuse(c.RemoteAddr(), errFull)
		return
	}
	g.wg.Add(1)
	go func() {
		defer func() { <-g.sem; g.wg.Done() }()
		if err := Handshake(c, g.secret, false, time.Now().Add(g.timeout)); err != nil {
			c.Close()
			g.Refuse(c.RemoteAddr(), err)
			return
		}
		g.admitted.Add(1)
		then(c)
	}()
}

// Wait waits for the handshakes in progress (after the listener closed).
func (g *Gate) Wait() { g.wg.Wait() }

// Refuse counts and logs a refused peer (also for refusals decided above
// the handshake, such as a wrong job or world size).
func (g *Gate) Refuse(addr net.Addr, err error) {
	n := g.refused.Add(1)
	if g.OnRefuse != nil {
		g.OnRefuse(addr, err)
	}
	if n <= 16 || n%256 == 0 {
		a := "?"
		if addr != nil {
			a = addr.String()
		}
		slog.Warn("ddstore: refused a connection", "listener", g.name, "peer", a, "refused", n, "err", err)
	}
}

// Refused is the number of connections refused so far.
func (g *Gate) Refused() int64 { return g.refused.Load() }

// Admitted is the number of peers that proved the secret so far.
func (g *Gate) Admitted() int64 { return g.admitted.Load() }

type gateErr string

func (e gateErr) Error() string { return string(e) }

const errFull = gateErr("too many connections waiting for authentication")
