package fault

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestErrorText(t *testing.T) {
	cases := []struct {
		e    *Error
		want string
	}{
		{&Error{Op: "GetBatch", Var: "image", Ranks: []int{3}, Side: Remote, Kind: ErrPeerDead, Detail: "rank 3 (pid 77) has exited"},
			`ddstore: GetBatch variable "image" (rank 3, remote): rank 3 (pid 77) has exited`},
		{&Error{Op: "barrier", Ranks: []int{1, 4, 5, 6}, Kind: ErrTimeout},
			`ddstore: barrier (ranks 1, 4-6): timeout`},
		{&Error{Op: "fi_mr_reg", Side: Local, Detail: "Cannot allocate memory"},
			`ddstore: fi_mr_reg (local): Cannot allocate memory`},
		{&Error{Op: "open", Err: io.EOF}, `ddstore: open: EOF`},
	}
	for _, c := range cases {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
}

func TestClassesAndFields(t *testing.T) {
	cause := &Error{Op: "fi_read", Ranks: []int{7}, Side: Remote, Kind: ErrTimeout, Err: io.ErrUnexpectedEOF}
	outer := &Error{Op: "GetBatch", Var: "x", Kind: ErrTimeout, Err: cause}
	wrapped := fmt.Errorf("trainer: %w", outer)
	if !errors.Is(wrapped, ErrTimeout) || !errors.Is(wrapped, io.ErrUnexpectedEOF) || errors.Is(wrapped, ErrPeerDead) {
		t.Fatalf("errors.Is classes wrong for %v", wrapped)
	}
	if RankOf(wrapped) != 7 || SideOf(wrapped) != Remote || !IsRemote(wrapped) || IsLocal(wrapped) {
		t.Fatalf("fields: rank %d side %v", RankOf(wrapped), SideOf(wrapped))
	}
	var e *Error
	if !errors.As(wrapped, &e) || e.Op != "GetBatch" || e.Rank() != -1 {
		t.Fatalf("errors.As gave %+v", e)
	}
	if RankOf(io.EOF) != -1 || SideOf(nil) != Unknown || RanksOf(nil) != nil {
		t.Fatal("non-fault errors must name no rank and no side")
	}
	local := New(ErrInvalid, "Add", "row size %d", 0)
	local.Side = Local
	if !errors.Is(local, ErrInvalid) || !IsLocal(local) || local.Error() != "ddstore: Add (local): row size 0" {
		t.Fatalf("New: %v", local)
	}
}

// TestParts: an abort frame carries the outermost *Error's kind, ranks and
// detail, even through a wrap; a plain error travels as its text alone.
func TestParts(t *testing.T) {
	inner := &Error{Op: "fi_read", Kind: ErrPeerDead, Ranks: []int{3}, Detail: "rank 3 is gone"}
	kind, ranks, detail := Parts(fmt.Errorf("allreduce: %w", inner))
	if kind != ErrPeerDead || len(ranks) != 1 || ranks[0] != 3 || detail != "rank 3 is gone" {
		t.Fatalf("Parts(wrapped) = %v %v %q", kind, ranks, detail)
	}
	kind, ranks, detail = Parts(&Error{Op: "barrier", Kind: ErrTimeout, Err: io.EOF})
	if kind != ErrTimeout || ranks != nil || detail == "" {
		t.Fatalf("Parts(no detail) = %v %v %q", kind, ranks, detail)
	}
	if want := (&Error{Op: "barrier", Kind: ErrTimeout, Err: io.EOF}).Error(); detail != want {
		t.Fatalf("Parts(no detail) detail %q, want the error's text %q", detail, want)
	}
	kind, ranks, detail = Parts(io.ErrUnexpectedEOF)
	if kind != nil || ranks != nil || detail != io.ErrUnexpectedEOF.Error() {
		t.Fatalf("Parts(plain) = %v %v %q", kind, ranks, detail)
	}
}
