package fabric

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ddstore/ddstore/fault"
)

// GatherTry is what one gather request of TryGather got.
type GatherTry struct {
	OK        bool // the request was answered
	TimedOut  bool // it failed with fault.ErrTimeout (a stranger's request is dropped unanswered)
	Untouched bool // the destination is still all zero
	// Pattern: "-" unanswered; answered, "good" when the row holds
	// CheckPattern's bytes (a ServeTarget target), else "other".
	Pattern string
	Err     string // the error, "" when answered
}

// String is the one-line form a stranger process prints and ParseGatherTry
// reads: "TRY ok timed-out untouched pattern "error"".
func (g GatherTry) String() string {
	return fmt.Sprintf("TRY %v %v %v %s %q", g.OK, g.TimedOut, g.Untouched, g.Pattern, g.Err)
}

// ParseGatherTry reads a line of GatherTry.String.
func ParseGatherTry(line string) (GatherTry, error) {
	var g GatherTry
	rest, ok := strings.CutPrefix(line, "TRY ")
	if !ok {
		return g, fmt.Errorf("not a gather try: %q", line)
	}
	f := strings.SplitN(rest, " ", 5)
	if len(f) != 5 {
		return g, fmt.Errorf("gather try %q: want 5 fields", line)
	}
	var err1, err2, err3, err4 error
	g.OK, err1 = strconv.ParseBool(f[0])
	g.TimedOut, err2 = strconv.ParseBool(f[1])
	g.Untouched, err3 = strconv.ParseBool(f[2])
	g.Pattern = f[3]
	g.Err, err4 = strconv.Unquote(f[4])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return g, fmt.Errorf("gather try %q: %w", line, err)
	}
	return g, nil
}

// TryGather is a stranger's view of a target (tests, examples/netns): it
// opens o (o.GatherKey is the key it sends), and sends calls gather
// requests of one row of rowBytes each to the target at addr whose
// exported memory has key and base, one call at a time, each within
// o.Timeout, reporting what each got. A target with another gather key
// answers none (each times out, its destination untouched) and counts
// each in its GatherStrangers.
func TryGather(o Options, addr []byte, key, base uint64, rowBytes, calls int) ([]GatherTry, error) {
	f, err := Open(o)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := f.NewReader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	peer, err := r.AddPeer(0, addr)
	if err != nil {
		return nil, err
	}
	dst := make([]byte, rowBytes)
	out := make([]GatherTry, 0, calls)
	for i := range calls {
		clear(dst)
		off := uint64((7*i + 1) * rowBytes)
		_, err := r.ReadGather([]ReadOp{{Dst: dst, Peer: peer, Addr: base + off, Key: key}})
		g := GatherTry{OK: err == nil, TimedOut: errors.Is(err, fault.ErrTimeout), Untouched: true, Pattern: "-"}
		for _, b := range dst {
			g.Untouched = g.Untouched && b == 0
		}
		if err != nil {
			g.Err = err.Error()
		} else if g.Pattern = "good"; CheckPattern(dst, off) != nil {
			g.Pattern = "other"
		}
		out = append(out, g)
	}
	return out, nil
}

// StrangerMain is the main of a stranger process: TryGather, then one
// line per call on stdout (GatherTry.String, for ParseGatherTry); it
// returns the exit code (1 when the stranger could not even try).
func StrangerMain(o Options, addr []byte, key, base uint64, rowBytes, calls int) int {
	tries, err := TryGather(o, addr, key, base, rowBytes, calls)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stranger:", err)
		return 1
	}
	for _, g := range tries {
		fmt.Println(g)
	}
	return 0
}
