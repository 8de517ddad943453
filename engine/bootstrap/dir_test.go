package bootstrap

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func dirEnv(dir, token string) func(int) []string {
	return func(int) []string {
		return []string{"DDSTORE_BOOTSTRAP_DIR=" + dir, "DDSTORE_JOB=dirtest", "DDSTORE_JOB_TOKEN=" + token}
	}
}

func TestDirAllGather(t *testing.T) {
	dir := t.TempDir()
	res := spawn(t, spawnSpec{role: "gather", method: "auto", world: 4, timeout: 10 * time.Second, env: dirEnv(dir, "tok")})
	wantAllOK(t, res)
	if _, err := os.Stat(filepath.Join(dir, "dirtest")); !os.IsNotExist(err) {
		ents, _ := os.ReadDir(filepath.Join(dir, "dirtest"))
		t.Errorf("job directory not removed on Close: %v, %d entries", err, len(ents))
	}
}

func TestDirMissingRank(t *testing.T) {
	res := spawn(t, spawnSpec{role: "gather", method: "dir", world: 4, ranks: []int{0, 2, 3}, timeout: 2 * time.Second,
		env: dirEnv(t.TempDir(), "tok")})
	for _, r := range []int{0, 2, 3} {
		wantKind(t, res, r, "timeout", []int{1}, "rank 1 did not arrive")
	}
}

func TestDirMismatch(t *testing.T) {
	res := spawn(t, spawnSpec{role: "mismatch", method: "dir", world: 3, timeout: 5 * time.Second, env: dirEnv(t.TempDir(), "tok")})
	wantKind(t, res, 0, "collective mismatch", []int{1}, `rank 1 called "shard-sizes" (#1), rank 0 called "fabric-addr" (#1)`)
	// Rank 1 names whichever other rank's file it read first.
	other := 0
	if rr := res[1]; len(rr.Ranks) == 1 && rr.Ranks[0] == 2 {
		other = 2
	}
	wantKind(t, res, 1, "collective mismatch", []int{other},
		fmt.Sprintf(`rank %d called "fabric-addr" (#1), rank 1 called "shard-sizes" (#1)`, other))
	wantKind(t, res, 2, "collective mismatch", []int{1}, `rank 1 called "shard-sizes" (#1), rank 2 called "fabric-addr" (#1)`)
}

func TestDirTokenMismatch(t *testing.T) {
	dir := t.TempDir()
	res := spawn(t, spawnSpec{role: "gather", method: "dir", world: 2, timeout: 3 * time.Second,
		env: func(i int) []string {
			if i == 1 {
				return dirEnv(dir, "other-job")(i)
			}
			return dirEnv(dir, "tok")(i)
		}})
	wantKind(t, res, 0, "job token mismatch", []int{1}, "rank 1's file")
	wantKind(t, res, 1, "job token mismatch", []int{0}, "rank 0's file")
}

// A rank that dies between collectives is a rank that never arrives.
func TestDirKilledRank(t *testing.T) {
	res := spawn(t, spawnSpec{role: "die", method: "dir", world: 3, timeout: 2 * time.Second, env: dirEnv(t.TempDir(), "tok")})
	for _, r := range []int{0, 1} {
		wantKind(t, res, r, "timeout", []int{2}, "rank 2 did not arrive")
	}
}
