package doctor

import (
	"fmt"
	"strings"
	"testing"
)

// Partners: ring neighbours always, the same draw on every call, never
// the rank itself, bounded by k whatever the world.
func TestPartners(t *testing.T) {
	for _, world := range []int{2, 3, 4, 17, 1000} {
		for r := 0; r < world; r += max(1, world/7) {
			p := Partners(r, world, 2, 1)
			q := Partners(r, world, 2, 1)
			if fmt.Sprint(p) != fmt.Sprint(q) || len(p) > 4 || len(p) < min(2, world-1) {
				t.Fatalf("world %d rank %d: %v, %v", world, r, p, q)
			}
			has := map[int]bool{}
			for _, x := range p {
				if x == r || x < 0 || x >= world || has[x] {
					t.Fatalf("world %d rank %d: %v", world, r, p)
				}
				has[x] = true
			}
			if !has[(r+1)%world] || !has[(r-1+world)%world] {
				t.Fatalf("world %d rank %d: no ring neighbours in %v", world, r, p)
			}
		}
	}
	if Partners(0, 1, 2, 1) != nil {
		t.Fatal("a world of one has no partners")
	}
}

// judgeJob names the host every link of which is slow, not the links of
// others; a failed read counts as slow; different choices are findings.
func TestJudgeJob(t *testing.T) {
	rank := func(r int, host string, links ...Link) RankResult {
		for i := range links {
			links[i].From, links[i].FromHost = r, host
		}
		return RankResult{Rank: r, Host: host, Choices: Choices{Provider: "tcp;ofi_rxm", Window: 128, Config: "c"}, Links: links}
	}
	rep := &JobReport{Ranks: []RankResult{
		rank(0, "h0", Link{To: 1, GBps: 2}, Link{To: 2, GBps: 0.006}, Link{To: 3, GBps: 1.5}),
		rank(1, "h1", Link{To: 0, GBps: 1}, Link{To: 2, GBps: 0.005}, Link{To: 3, GBps: 3}),
		rank(2, "h2", Link{To: 0, GBps: 1.2}, Link{To: 1, GBps: 0.9}, Link{To: 3, GBps: 2.5}),
		rank(3, "h3", Link{To: 0, GBps: 2}, Link{To: 2, Error: "deadline"}, Link{To: 1, GBps: 0.4}),
	}}
	judgeJob(rep, 10)
	if fmt.Sprint(rep.SlowHosts) != "[h2]" || len(rep.SlowLinks) != 3 || len(rep.Findings) != 1 || rep.Findings[0].Rule != "slow_host" {
		t.Fatalf("hosts %v links %+v findings %+v", rep.SlowHosts, rep.SlowLinks, rep.Findings)
	}
	rep.Ranks[3].Choices.Provider = "sockets"
	rep.Ranks[2].Choices.EagerLimit = "16384"
	rep.SlowLinks, rep.SlowHosts = nil, nil
	judgeJob(rep, 10)
	if len(rep.Disagreement) != 2 || !strings.Contains(rep.Disagreement[0], "eager") || !strings.Contains(rep.Disagreement[1], "sockets") ||
		rep.Findings[len(rep.Findings)-1].Rule != "choices_differ" {
		t.Fatalf("disagreements %v findings %+v", rep.Disagreement, rep.Findings)
	}
	// Nothing slow: no finding.
	for i := range rep.Ranks {
		rep.Ranks[i].Choices.Provider, rep.Ranks[i].Choices.EagerLimit = "tcp;ofi_rxm", ""
		for j := range rep.Ranks[i].Links {
			rep.Ranks[i].Links[j].GBps, rep.Ranks[i].Links[j].Error = 1+float64(j), ""
		}
	}
	rep.SlowLinks, rep.SlowHosts, rep.Disagreement = nil, nil, nil
	judgeJob(rep, 10)
	if len(rep.Findings) != 0 || len(rep.SlowLinks) != 0 {
		t.Fatalf("%+v", rep.Findings)
	}
}
