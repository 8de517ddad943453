package engine

import "testing"

// TestGatherKey: the gather key is a function of the secret alone (every
// rank of a job derives the same one), another secret gives another key,
// and no secret gives 0 (no check).
func TestGatherKey(t *testing.T) {
	a := []byte("0123456789abcdef0123456789abcdef")
	b := []byte("0123456789abcdef0123456789abcdeF")
	ka, kb := gatherKey(a), gatherKey(append([]byte(nil), a...))
	if ka == 0 || ka != kb {
		t.Fatalf("same secret: keys %#x and %#x", ka, kb)
	}
	if k := gatherKey(b); k == ka || k == 0 {
		t.Fatalf("secrets one byte apart: keys %#x and %#x", ka, k)
	}
	if k := gatherKey(nil); k != 0 {
		t.Fatalf("no secret: key %#x, want 0 (no check)", k)
	}
	if ka != gatherKeyA {
		t.Fatalf("key %#x, want %#x", ka, uint64(gatherKeyA))
	}
}

// gatherKeyA: openssl's HMAC-SHA256 of "ddstore gather key v1" with the
// secret a is 38cf973d398437a0…, read as a little-endian uint64.
const gatherKeyA = 0xa03784393d97cf38
