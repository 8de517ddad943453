package engine

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestShardLeftoverDecision(t *testing.T) {
	const me, other = 1000, 1001
	for _, c := range []struct {
		name     string
		unlocked bool
		age      time.Duration
		uid      uint32
		want     bool
	}{
		{"owner gone, old, mine", true, time.Hour, me, true},
		{"owner holds the lock", false, time.Hour, me, false},
		{"just created", true, time.Second, me, false},
		{"another user's", true, time.Hour, other, false},
	} {
		if got := shardLeftover(c.unlocked, c.age, time.Minute, c.uid, me); got != c.want {
			t.Errorf("%s: shardLeftover = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSweepShards: a shard whose owner still holds it stays; once the
// owner's lock is gone (as when its process dies) the sweep removes it;
// files that are no shards stay.
func TestSweepShards(t *testing.T) {
	dir := t.TempDir()
	f, err := createShard(dir, shardName("job", 0, 1, "x"), "x", 4096)
	if err != nil {
		t.Fatal(err)
	}
	if f.lock < 0 {
		t.Fatal("the owner holds no lock on its shard")
	}
	other := filepath.Join(dir, "ddstore-job.tel")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := sweepShards(dir, 0); len(got) != 0 {
		t.Fatalf("swept a shard whose owner lives: %q", got)
	}
	if got := sweepShards(dir, time.Hour); len(got) != 0 {
		t.Fatalf("swept a young shard: %q", got)
	}
	// What the kernel does when the owner dies: its descriptor and its
	// mapping (which holds the open file too) go.
	unix.Close(f.lock)
	if err := unix.Munmap(f.mem); err != nil {
		t.Fatal(err)
	}
	f.lock, f.mem, f.data = -1, nil, nil
	got := sweepShards(dir, 0)
	if len(got) != 1 || got[0] != f.path {
		t.Fatalf("swept %q, want [%s]", got, f.path)
	}
	if _, err := os.Stat(f.path); !os.IsNotExist(err) {
		t.Fatalf("shard still there: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("a file that is no shard was removed: %v", err)
	}
}
