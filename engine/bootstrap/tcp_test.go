package bootstrap

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ddstore/ddstore/cmd/ddrun/launch"
)

func freePort(t *testing.T) string {
	t.Helper()
	p, err := launch.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(p)
}

func tcpEnv(port, token string) func(int) []string {
	return func(int) []string {
		return []string{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port, "DDSTORE_JOB=tcptest-" + port, "DDSTORE_JOB_TOKEN=" + token}
	}
}

func TestTCPAllGather(t *testing.T) {
	res := spawn(t, spawnSpec{role: "gather", method: "auto", world: 4, timeout: 10 * time.Second, env: tcpEnv(freePort(t), "tok")})
	wantAllOK(t, res)
}

// A rank that never starts: rank 0 names it, the others hear it from rank 0.
func TestTCPMissingRank(t *testing.T) {
	start := time.Now()
	res := spawn(t, spawnSpec{role: "gather", method: "tcp", world: 4, ranks: []int{0, 1, 2}, timeout: 2 * time.Second,
		env: tcpEnv(freePort(t), "tok")})
	wantKind(t, res, 0, "timeout", []int{3}, "rank 3 did not connect")
	wantKind(t, res, 1, "timeout", []int{3}, "rank 0 reports: rank 3 did not connect")
	wantKind(t, res, 2, "timeout", []int{3}, "rank 3 did not connect")
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v with a 2s timeout", d)
	}
}

// The last rank arrives after the others' connect deadline (it starts
// 2 × timeout late; 3 s leaves ranks 0 and 1 room to start on a loaded machine).
func TestTCPLateRank(t *testing.T) {
	res := spawn(t, spawnSpec{role: "late", method: "tcp", world: 3, timeout: 3 * time.Second, env: tcpEnv(freePort(t), "tok")})
	wantKind(t, res, 0, "timeout", []int{2}, "rank 2 did not connect")
	wantKind(t, res, 1, "timeout", []int{2}, "rank 2 did not connect")
	// Rank 2 finds rank 0 gone (or refusing): it names rank 0.
	if rr := res[2]; rr.OK || len(rr.Ranks) != 1 || rr.Ranks[0] != 0 {
		t.Errorf("late rank 2: %+v", rr)
	}
}

func TestTCPTokenMismatch(t *testing.T) {
	port := freePort(t)
	res := spawn(t, spawnSpec{role: "gather", method: "tcp", world: 2, timeout: 2 * time.Second,
		env: func(i int) []string {
			tok := "right"
			if i == 1 {
				tok = "wrong"
			}
			return tcpEnv(port, tok)(i)
		}})
	wantKind(t, res, 1, "job token mismatch", []int{1}, "refused rank 1: job token mismatch")
	wantKind(t, res, 0, "timeout", []int{1}, "rank 1 did not connect")
	if !res[0].Token {
		t.Errorf("rank 0's error does not wrap fault.ErrToken: %s", res[0].Err)
	}
}

// Two processes claim rank 1: rank 0 admits the first and refuses the
// second as a duplicate (ErrEnv naming rank 1); the admitted one and
// rank 0 time out on rank 2, which never comes.
func TestTCPDuplicateRank(t *testing.T) {
	res := spawnProcs(t, spawnSpec{role: "gather", method: "tcp", world: 3, ranks: []int{0, 1, 1}, timeout: 5 * time.Second,
		env: tcpEnv(freePort(t), "tok")})
	wantKind(t, res, 0, "timeout", []int{2}, "rank 2 did not connect")
	if !strings.Contains(res[0].Err, "duplicate rank: rank 1 is already connected") {
		t.Errorf("rank 0's error does not report the duplicate: %s", res[0].Err)
	}
	refused := 0
	for i := 1; i <= 2; i++ {
		if strings.Contains(res[i].Err, "duplicate rank") {
			refused++
			wantKind(t, res, i, "bad environment", []int{1}, "refused rank 1: duplicate rank: rank 1 is already connected from 127.0.0.1:")
		} else {
			wantKind(t, res, i, "timeout", []int{2}, "rank 0 reports: rank 2 did not connect")
		}
	}
	if refused != 1 {
		t.Errorf("%d of the two rank-1 processes refused as a duplicate, want exactly 1: %+v, %+v", refused, res[1], res[2])
	}
}

func TestTCPMismatch(t *testing.T) {
	res := spawn(t, spawnSpec{role: "mismatch", method: "tcp", world: 3, timeout: 5 * time.Second, env: tcpEnv(freePort(t), "tok")})
	msg := `collective mismatch: rank 1 called "shard-sizes" (#1), rank 0 called "fabric-addr" (#1)`
	for r := range 3 {
		wantKind(t, res, r, "collective mismatch", []int{1}, msg)
	}
}

func TestTCPKilledRank(t *testing.T) {
	res := spawn(t, spawnSpec{role: "die", method: "tcp", world: 4, timeout: 5 * time.Second, env: tcpEnv(freePort(t), "tok")})
	if _, ok := res[2]; ok {
		t.Errorf("rank 2 was to die, reported %+v", res[2])
	}
	for _, r := range []int{0, 1, 3} {
		wantKind(t, res, r, "peer lost", []int{2}, "rank 2")
	}
}
