package fabric

import "testing"

// Requested MR keys start at a random base per process: not derived from
// the pid, different each time, below 2^63, with 24 bits of counter room.
func TestKeyBaseRandom(t *testing.T) {
	seen := map[uint64]bool{}
	for range 64 {
		k := keyBase(8)
		if k == 0 || k&(1<<24-1) != 0 || k>>63 != 0 {
			t.Fatalf("key base %#x", k)
		}
		if seen[k] {
			t.Fatalf("key base %#x drawn twice in 64 draws", k)
		}
		seen[k] = true
	}
	if keyBase(4) != 1 {
		t.Fatalf("4-byte keys: base %d, want 1", keyBase(4))
	}
}
