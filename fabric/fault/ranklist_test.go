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
