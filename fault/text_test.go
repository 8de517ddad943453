package fault

import (
	"strings"
	"testing"
)

func TestRankList(t *testing.T) {
	for in, want := range map[string]string{"3": "rank 3", "1,2,3,5": "ranks 1-3, 5", "0,2": "ranks 0, 2"} {
		var rs []int
		for _, f := range strings.Split(in, ",") {
			rs = append(rs, int(f[0]-'0'))
		}
		if got := RankList(rs); got != want {
			t.Errorf("%v: %q want %q", rs, got, want)
		}
	}
}

// A nested *Error says "ddstore" once, at the front.
func TestNestedText(t *testing.T) {
	inner := &Error{Op: "Get", Var: "x", Kind: ErrIndex, Detail: "rows [3,5) outside [0,4)"}
	outer := &Error{Op: "Loader", Var: "x", Kind: ErrInvalid, Detail: "epoch 0 batch 1", Err: inner}
	want := `ddstore: Loader variable "x": epoch 0 batch 1: Get variable "x": rows [3,5) outside [0,4)`
	if got := outer.Error(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
