package fault_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/ddstore/ddstore/fault"
)

// Every class, from outside the package: an *Error of that kind, wrapped
// by a caller, matches its sentinel with errors.Is, yields its fields to
// errors.As, and has the class's code; classes and codes are one to one.
func TestClassesFromOutside(t *testing.T) {
	seen := map[int]string{}
	for _, c := range fault.Classes {
		if prev, dup := seen[c.Code]; dup || c.Code <= 0 || c.Code == fault.CodeOther {
			t.Fatalf("class %s: code %d (also %q)", c.Name, c.Code, prev)
		}
		seen[c.Code] = c.Name
		for _, sentinel := range c.Errs {
			err := fmt.Errorf("trainer step: %w", &fault.Error{Op: "GetBatch", Var: "x", Ranks: []int{3}, Kind: sentinel, Err: io.EOF})
			if !errors.Is(err, sentinel) || !errors.Is(err, io.EOF) {
				t.Errorf("%s: errors.Is(%v, %v) fails", c.Name, err, sentinel)
			}
			var fe *fault.Error
			if !errors.As(err, &fe) || fe.Op != "GetBatch" || fe.Rank() != 3 || fe.Kind != sentinel {
				t.Errorf("%s: errors.As gives %+v", c.Name, fe)
			}
			if got := fault.CodeOf(err); got != c.Code {
				t.Errorf("CodeOf(%v) = %d, want %s's %d", err, got, c.Name, c.Code)
			}
			if fault.ClassName(c.Code) != c.Name {
				t.Errorf("ClassName(%d) = %q, want %q", c.Code, fault.ClassName(c.Code), c.Name)
			}
		}
	}
	if fault.CodeOf(nil) != 0 || fault.CodeOf(io.EOF) != fault.CodeOther || fault.ClassName(fault.CodeOther) != "OTHER" || fault.ClassName(12345) != "" {
		t.Fatal("nil, classless errors or unknown codes map wrongly")
	}
	// The most specific class wins: a timeout whose cause is a dead peer.
	both := &fault.Error{Kind: fault.ErrTimeout, Err: &fault.Error{Kind: fault.ErrPeerDead}}
	if fault.CodeOf(both) != fault.CodeOf(fault.ErrPeerDead) {
		t.Fatalf("CodeOf(timeout wrapping a dead peer) = %d, want PEER_DEAD", fault.CodeOf(both))
	}
}
