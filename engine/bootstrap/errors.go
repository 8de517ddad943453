package bootstrap

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error returned by an Exchanger that falls in one of
// these classes wraps it (test with errors.Is) and is an *Error that carries
// the ranks concerned (errors.As).
var (
	// ErrTimeout: a deadline passed; Error.Ranks are the ranks that never arrived.
	ErrTimeout = errors.New("bootstrap: timeout")
	// ErrToken: a peer presented a different job token; it belongs to another job.
	ErrToken = errors.New("bootstrap: job token mismatch")
	// ErrMismatch: ranks called different collectives (tag or sequence number),
	// or disagree on the world size.
	ErrMismatch = errors.New("bootstrap: collective mismatch")
	// ErrPeerLost: a peer's connection dropped or it closed its exchanger.
	ErrPeerLost = errors.New("bootstrap: peer lost")
	// ErrClosed: the exchanger was closed, or broken by an earlier failure.
	ErrClosed = errors.New("bootstrap: exchanger closed")
	// ErrEnv: the launcher's environment is missing or inconsistent.
	ErrEnv = errors.New("bootstrap: bad environment")
	// ErrTooLarge: a blob or message exceeds MaxMessage.
	ErrTooLarge = errors.New("bootstrap: message too large")
)

// MaxMessage bounds one rank's blob and the gathered result of one collective.
const MaxMessage = 1 << 30

// Error is the concrete error of this package.
type Error struct {
	Method string // "tcp", "dir", "pmi", "single", "env"
	Op     string // e.g. `connect`, `allgather "fabric-addr"`
	Kind   error  // one of the sentinels above
	Ranks  []int  // ranks concerned: missing, lost or mismatched (may be nil)
	Detail string // human readable cause
	Err    error  // underlying error, if any
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("bootstrap")
	if e.Method != "" {
		b.WriteString(" " + e.Method)
	}
	if e.Op != "" {
		b.WriteString(" " + e.Op)
	}
	b.WriteString(": ")
	if e.Detail != "" {
		b.WriteString(e.Detail)
	} else if e.Kind != nil {
		b.WriteString(strings.TrimPrefix(e.Kind.Error(), "bootstrap: "))
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	return b.String()
}

// Unwrap exposes both the sentinel kind and the underlying cause.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}

// RanksOf returns the ranks carried by err (nil if err is not an *Error).
func RanksOf(err error) []int {
	var e *Error
	if errors.As(err, &e) {
		return e.Ranks
	}
	return nil
}

// rankList formats ranks compactly: "3", "ranks 1, 4-6".
func rankList(ranks []int) string {
	if len(ranks) == 1 {
		return fmt.Sprintf("rank %d", ranks[0])
	}
	var parts []string
	for i := 0; i < len(ranks); {
		j := i
		for j+1 < len(ranks) && ranks[j+1] == ranks[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ranks[i], ranks[j]))
		} else {
			parts = append(parts, fmt.Sprint(ranks[i]))
		}
		i = j + 1
	}
	return "ranks " + strings.Join(parts, ", ")
}
