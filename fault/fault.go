// Package fault owns ddstore's one error type. Every error that package
// fabric, engine/bootstrap and engine return is a *Error, or wraps one: it
// carries the operation, the variable and the ranks concerned, whether the
// failure is this rank's own (Local) or the peer's or the path's to it
// (Remote), a sentinel class and the underlying cause.
//
// Test the class with errors.Is against the sentinels below (engine,
// fabric and bootstrap re-export the ones their callers meet), and read
// the fields with errors.As or the helpers RanksOf, RankOf and SideOf.
// Packages with richer errors of their own (gpu, telemetry, the local
// launcher) make their sentinels with Sentinel, so that each belongs to a
// class here: errors.Is(err, fault.ErrClosed) holds whichever layer
// closed. Classes (classes.go) gives each class its stable code and name:
// the C ABI's codes and the Python exceptions are derived from it.
//
// The package is pure Go and imports nothing of ddstore's, so every layer
// (engine, fabric, gpu, telemetry, configs, the launchers and the C ABI)
// can use it.
package fault

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel classes. An *Error matches its Kind with errors.Is.
var (
	// ErrIndex: a row index or range outside the global rows, or an
	// Update outside the local shard.
	ErrIndex = errors.New("ddstore: index out of range")
	// ErrUnknownVar: no variable of that name.
	ErrUnknownVar = errors.New("ddstore: unknown variable")
	// ErrShortBuffer: a destination holds fewer bytes than the rows asked.
	ErrShortBuffer = errors.New("ddstore: destination buffer too short")
	// ErrDType: an invalid data type, row size or data length.
	ErrDType = errors.New("ddstore: invalid data type or row size")
	// ErrMismatch: ranks disagree in a collective call (name, dtype, row
	// size, tag, world size).
	ErrMismatch = errors.New("ddstore: ranks disagree in collective call")
	// ErrExists: Add or Init of a variable that already exists.
	ErrExists = errors.New("ddstore: variable already exists")
	// ErrPeerDead: a rank has exited or is unreachable.
	ErrPeerDead = errors.New("ddstore: peer rank dead")
	// ErrClosed: the store, reader, fabric or exchange was closed.
	ErrClosed = errors.New("ddstore: closed")
	// ErrTimeout: an operation did not finish before its deadline.
	ErrTimeout = errors.New("ddstore: timeout")
	// ErrInvalid: an invalid argument or option.
	ErrInvalid = errors.New("ddstore: invalid argument")
	// ErrNoLibrary: a native library (libfabric, a GPU runtime) could not
	// be loaded; the text says what was tried and what to install.
	ErrNoLibrary = errors.New("ddstore: native library not found")
	// ErrNoProvider: the requested libfabric provider is not available.
	ErrNoProvider = errors.New("ddstore: fabric provider not available")
	// ErrNoDomain: the requested fabric domain or interface is not available.
	ErrNoDomain = errors.New("ddstore: fabric domain not available")
	// ErrRejected: a target refused a request (unknown key, range outside
	// its export); the peer is alive.
	ErrRejected = errors.New("ddstore: request rejected by the target")
	// ErrToken: a peer presented another job's token.
	ErrToken = errors.New("ddstore: job token mismatch")
	// ErrEnv: the launcher's environment is missing or inconsistent.
	ErrEnv = errors.New("ddstore: bad launcher environment")
	// ErrTooLarge: a message exceeds its limit.
	ErrTooLarge = errors.New("ddstore: message too large")
	// ErrCorrupt: a file or message that is not what it claims (a foreign,
	// truncated, corrupt or newer-version telemetry segment).
	ErrCorrupt = errors.New("ddstore: corrupt or foreign data")
)

// Side says whose failure an error is.
type Side uint8

const (
	// Unknown: not classified (argument errors, for example).
	Unknown Side = iota
	// Local: this rank's own resources failed: its memory registration,
	// memory, endpoint or completion queue. The peer may be healthy.
	Local
	// Remote: the peer, or the path to it, failed: a dead or unreachable
	// rank, a reset connection, a deadline that the peer did not meet.
	Remote
)

func (s Side) String() string {
	switch s {
	case Local:
		return "local"
	case Remote:
		return "remote"
	}
	return "unknown"
}

// Error is ddstore's error.
type Error struct {
	Op     string // operation: "GetBatch", "fi_read", `allgather "x"`, "open"
	Var    string // variable, "" when none
	Ranks  []int  // ranks concerned (the peer read, ranks missing from a collective, replicas tried); nil when none
	Side   Side   // Local, Remote or Unknown
	Kind   error  // sentinel class, nil when none fits
	Detail string // what happened, in words; Kind's text when empty
	Err    error  // underlying cause, nil when none
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("ddstore")
	if e.Op != "" {
		b.WriteString(": ")
		b.WriteString(e.Op)
	}
	if e.Var != "" {
		fmt.Fprintf(&b, " variable %q", e.Var)
	}
	if len(e.Ranks) > 0 {
		b.WriteString(" (")
		b.WriteString(RankList(e.Ranks))
		if e.Side != Unknown {
			b.WriteString(", " + e.Side.String())
		}
		b.WriteString(")")
	} else if e.Side == Local {
		b.WriteString(" (local)")
	}
	switch {
	case e.Detail != "":
		b.WriteString(": " + e.Detail)
	case e.Kind != nil:
		b.WriteString(": " + strings.TrimPrefix(e.Kind.Error(), "ddstore: "))
	}
	if e.Err != nil {
		// A cause that is ddstore's own error says "ddstore" once, here.
		b.WriteString(": " + strings.TrimPrefix(e.Err.Error(), "ddstore: "))
	}
	return b.String()
}

// Unwrap exposes the sentinel class and the cause to errors.Is and errors.As.
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

// Rank is the first rank concerned, or -1.
func (e *Error) Rank() int {
	if len(e.Ranks) == 0 {
		return -1
	}
	return e.Ranks[0]
}

// New returns an *Error of class kind with a formatted detail.
func New(kind error, op string, format string, args ...any) *Error {
	return &Error{Op: op, Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// outermost returns the first *Error in err's chain, or nil.
func outermost(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// Parts is what a peer needs to rebuild err on its side (a collective's
// abort frame): the outermost *Error's kind, ranks and detail, or nil, nil
// and err's text when err is not an *Error (or its detail is empty).
func Parts(err error) (kind error, ranks []int, detail string) {
	detail = err.Error()
	if e := outermost(err); e != nil {
		kind, ranks = e.Kind, e.Ranks
		if e.Detail != "" {
			detail = e.Detail
		}
	}
	return kind, ranks, detail
}

// RanksOf returns the ranks that err names, from the outermost *Error that
// names any; nil when none does.
func RanksOf(err error) []int {
	for err != nil {
		e := outermost(err)
		if e == nil {
			return nil
		}
		if len(e.Ranks) > 0 {
			return e.Ranks
		}
		err = e.Err
	}
	return nil
}

// RankOf is the first rank that err names, or -1.
func RankOf(err error) int {
	if r := RanksOf(err); len(r) > 0 {
		return r[0]
	}
	return -1
}

// SideOf is the side of the outermost *Error in err's chain that says one,
// or Unknown.
func SideOf(err error) Side {
	for err != nil {
		e := outermost(err)
		if e == nil {
			return Unknown
		}
		if e.Side != Unknown {
			return e.Side
		}
		err = e.Err
	}
	return Unknown
}

// IsRemote reports whether err is classified as the peer's or the path's
// failure: only such an error may mark a peer dead.
func IsRemote(err error) bool { return SideOf(err) == Remote }

// IsLocal reports whether err is classified as this rank's own failure.
func IsLocal(err error) bool { return SideOf(err) == Local }

// RankList formats ranks compactly: "rank 3", "ranks 1, 4-6".
func RankList(ranks []int) string {
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
