package bootstrap

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ddstore/ddstore/engine/auth"
	"github.com/ddstore/ddstore/fault"
)

// collective is the bookkeeping shared by the exchangers: sequence numbers,
// default timeout, and the "broken after the first failure" rule.
type collective struct {
	method  string
	rank    int
	world   int
	timeout time.Duration
	seq     uint64 // number of the collective in progress (connect is 0)
	broken  error
	closed  bool
	release func() // gives the rendezvous back (held.go); nil until Connect succeeded

	secret    []byte // the job's secret (secret.go); nil when insecure
	secretSrc string
	jobToken  string // Options.Token as resolved: equal on every rank (peers with another are refused)
}

// newCollective is the bookkeeping of an exchanger of method for r.
func (r resolved) newCollective(method string) collective {
	return collective{method: method, rank: r.Env.Rank, world: r.Env.World, timeout: r.Timeout,
		secret: r.secret, secretSrc: r.secretSrc, jobToken: r.Token}
}

// launcherSecret: rank 0 makes the job's secret when the launcher's
// exchange (pmi, dir) is to publish it; mine is what rank 0 appends to its
// connect blob ("" for the others, or when the secret is already known).
func (c *collective) launcherSecret() (mine string) {
	if c.secretSrc != SecretLauncher || c.rank != 0 {
		return ""
	}
	c.secret = newSecret()
	return " secret=" + string(c.secret)
}

// takeSecret reads the secret from rank 0's connect blob (split at " secret=").
func (c *collective) takeSecret(root []byte) error {
	if c.secretSrc != SecretLauncher || c.rank == 0 {
		return nil
	}
	_, s, ok := strings.Cut(string(root), " secret=")
	if !ok || len(s) < auth.MinSecret {
		return &fault.Error{Op: opName(c.method, "connect"), Kind: fault.ErrToken, Side: fault.Remote, Ranks: []int{0},
			Detail: "rank 0 published no job secret (is it running without one, DDSTORE_INSECURE, or an older ddstore?)"}
	}
	c.secret = []byte(s)
	return nil
}

// withoutSecret is a connect blob without rank 0's secret.
func withoutSecret(b []byte) string {
	s, _, _ := strings.Cut(string(b), " secret=")
	return s
}

func (c *collective) Rank() int { return c.rank }
func (c *collective) Size() int { return c.world }

// Method is the bootstrap method: "pmi", "pmi2", "tcp" or "dir".
func (c *collective) Method() string { return c.method }

// begin starts collective number c.seq+1 and returns its op name and deadline.
func (c *collective) begin(kind, tag string, mine []byte, timeout time.Duration) (string, time.Time, error) {
	op := fmt.Sprintf("%s %q", kind, tag)
	if c.closed {
		return op, time.Time{}, &fault.Error{Op: opName(c.method, op), Kind: fault.ErrClosed, Side: fault.Local, Detail: "exchanger closed"}
	}
	if c.broken != nil {
		return op, time.Time{}, &fault.Error{Op: opName(c.method, op), Kind: fault.ErrClosed, Side: fault.Local,
			Detail: "exchanger broken by an earlier failure", Err: c.broken}
	}
	if len(mine) > MaxMessage {
		return op, time.Time{}, &fault.Error{Op: opName(c.method, op), Kind: fault.ErrTooLarge, Side: fault.Local,
			Detail: fmt.Sprintf("blob of %d bytes exceeds the limit of %d", len(mine), MaxMessage)}
	}
	if timeout <= 0 {
		timeout = c.timeout
	}
	c.seq++
	return op, time.Now().Add(timeout), nil
}

// fail marks the exchanger broken by err (if err is not nil) and returns err.
func (c *collective) fail(err error) error {
	if err != nil && c.broken == nil {
		c.broken = err
	}
	return err
}

func (c *collective) errf(op string, kind error, ranks []int, format string, args ...any) *fault.Error {
	return &fault.Error{Op: opName(c.method, op), Kind: kind, Side: sideOf(kind), Ranks: ranks, Detail: fmt.Sprintf(format, args...)}
}

// mismatchDetail is the message of fault.ErrMismatch for two ranks' collectives.
func mismatchDetail(r int, rSeq uint64, rTag string, ref int, refSeq uint64, refTag string) string {
	return fmt.Sprintf("collective mismatch: rank %d called %q (#%d), rank %d called %q (#%d)",
		r, rTag, rSeq, ref, refTag, refSeq)
}

// kind codes for the wire.
var kindCodes = []error{nil, fault.ErrTimeout, fault.ErrToken, fault.ErrMismatch, fault.ErrPeerDead, fault.ErrClosed, fault.ErrEnv, fault.ErrTooLarge}

func kindCode(err error) uint8 {
	for i, k := range kindCodes[1:] {
		if errors.Is(err, k) {
			return uint8(i + 1)
		}
	}
	return 0
}

func kindOf(code uint8) error {
	if int(code) < len(kindCodes) && code > 0 {
		return kindCodes[code]
	}
	return fault.ErrPeerDead
}

// backoff sleeps d (bounded by the deadline) and returns the next delay,
// doubling up to max.
func backoff(d, max time.Duration, deadline time.Time) time.Duration {
	if left := time.Until(deadline); left < d {
		d = left
	}
	if d > 0 {
		time.Sleep(d)
	}
	d *= 2
	if d > max {
		d = max
	}
	return d
}
