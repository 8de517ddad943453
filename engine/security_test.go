package engine

import "testing"

// TestGatherKey: with a secret the gather key is a function of the secret
// alone (every rank of a job derives the same one, whatever its job
// name), and another secret gives another key. Without one (insecure) it
// is a function of the job's identity: never 0 (0 checks nothing), the
// same for the same job, another for another job, and none of a secret's.
func TestGatherKey(t *testing.T) {
	a := []byte("0123456789abcdef0123456789abcdef")
	b := []byte("0123456789abcdef0123456789abcdeF")
	ka, kb := gatherKey(a, "job:x"), gatherKey(append([]byte(nil), a...), "job:y")
	if ka == 0 || ka != kb {
		t.Fatalf("same secret: keys %#x and %#x", ka, kb)
	}
	if k := gatherKey(b, "job:x"); k == ka || k == 0 {
		t.Fatalf("secrets one byte apart: keys %#x and %#x", ka, k)
	}
	if ka != gatherKeyA {
		t.Fatalf("key %#x, want %#x", ka, uint64(gatherKeyA))
	}
	i1, i2 := gatherKey(nil, "job:slurm-7.0"), gatherKey(nil, "job:slurm-7.0")
	if i1 == 0 || i1 != i2 || i1 == ka {
		t.Fatalf("insecure, same job: keys %#x and %#x (secret's %#x)", i1, i2, ka)
	}
	if k := gatherKey(nil, "job:slurm-7.1"); k == i1 || k == 0 {
		t.Fatalf("insecure, jobs slurm-7.0 and slurm-7.1: keys %#x and %#x", i1, k)
	}
	if k := gatherKey(nil, ""); k == 0 {
		t.Fatal("insecure, no job name: key 0 (no check)")
	}
	if i1 != gatherKeyInsecure {
		t.Fatalf("insecure key %#x, want %#x", i1, uint64(gatherKeyInsecure))
	}
}

// TestJobIdentity: a join's two launches share the storage job and token
// (each launch has its own launcher job id); otherwise the job token.
func TestJobIdentity(t *testing.T) {
	var o Options
	if got := jobIdentity(&o, "slurm-7.0"); got != "job:slurm-7.0" {
		t.Fatalf("plain job: %q", got)
	}
	o.Storage = StorageOptions{Ranks: 2, Job: "j", Token: "t"}
	trainer := jobIdentity(&o, "slurm-7.0")
	o.Role = RoleStorage
	if storage := jobIdentity(&o, "slurm-8.0"); storage != trainer || trainer != "storage:j\x00t" {
		t.Fatalf("join: trainer %q, storage %q", trainer, storage)
	}
}

// gatherKeyA: openssl's HMAC-SHA256 of "ddstore gather key v1" with the
// secret a is 38cf973d398437a0…, read as a little-endian uint64.
const gatherKeyA = 0xa03784393d97cf38

// gatherKeyInsecure: sha256sum of "ddstore insecure gather key v1" NUL
// "job:slurm-7.0", its first 8 bytes read as a little-endian uint64.
const gatherKeyInsecure = 0x325f34fdf74adda1
