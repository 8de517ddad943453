package engine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ddstore/ddstore/engine/placement"
	"github.com/ddstore/ddstore/telemetry"

	"github.com/ddstore/ddstore/fabric"
	"github.com/ddstore/ddstore/fault"
)

// TestFabricErrorSides: only a remote dead-peer error marks the peer dead;
// local failures (a forced registration failure, as fabric's
// TestLocalFailureIsLocal produces it), timeouts and rejections do not.
func TestFabricErrorSides(t *testing.T) {
	local := &fault.Error{Op: "fi_mr_reg(local)", Ranks: []int{3}, Side: fault.Local, Err: fabric.Errno(12)}
	remote := &fault.Error{Op: "fi_cq_readerr", Ranks: []int{3}, Side: fault.Remote, Kind: fault.ErrPeerDead, Err: fabric.Errno(107)}
	timeout := &fault.Error{Op: "read", Ranks: []int{3}, Side: fault.Remote, Kind: fault.ErrTimeout}
	rejected := &fault.Error{Op: "gather", Ranks: []int{3}, Kind: fault.ErrRejected}
	for _, c := range []struct {
		err  error
		dead bool
	}{{local, false}, {remote, true}, {timeout, false}, {rejected, false},
		{fmt.Errorf("wrapped: %w", local), false}, {fmt.Errorf("wrapped: %w", remote), true}} {
		if got := isPeerFailure(c.err); got != c.dead {
			t.Errorf("isPeerFailure(%v) = %v, want %v", c.err, got, c.dead)
		}
		if r := fabricErrRank(c.err); r != 3 {
			t.Errorf("fabricErrRank(%v) = %d, want 3", c.err, r)
		}
	}
	if !errors.Is(remote, fault.ErrPeerDead) || !errors.Is(timeout, fault.ErrTimeout) {
		t.Fatal("sentinels do not match")
	}
}

// TestFabricErrorMarksOnlyRemote goes through Var.fabricError, the read
// path's classifier: a local failure for an op to rank 3 leaves rank 3
// alive; a remote dead-peer error marks it.
func TestFabricErrorMarksOnlyRemote(t *testing.T) {
	v := &Var{name: "x", s: &Store{health: placement.NewHealth(8, telemetry.Nanotime)}}
	c := &readCtx{}
	local := &fault.Error{Op: "fi_mr_reg(local)", Ranks: []int{3}, Side: fault.Local, Err: fabric.Errno(12)}
	if err := v.fabricError(c, local); errors.Is(err, ErrPeerDead) || v.s.health.Dead(3) {
		t.Fatalf("local failure marked rank 3 dead: %v", err)
	}
	remote := &fault.Error{Op: "fi_cq_readerr", Ranks: []int{3}, Side: fault.Remote, Kind: fault.ErrPeerDead, Err: fabric.Errno(107)}
	if err := v.fabricError(c, remote); !errors.Is(err, ErrPeerDead) || !v.s.health.Dead(3) {
		t.Fatalf("remote failure did not mark rank 3 dead: %v", err)
	}
}
