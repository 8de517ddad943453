package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
)

// Secret says where the job's secret came from, the one every control
// connection of this store proved it knows (README "Security"): "launcher"
// (rank 0's random one through PMI or the directory), "env"
// (DDSTORE_TOKEN, which ddrun sets), "tokenfile", "option", "insecure"
// (none, by explicit choice), or "" for a one-rank job.
func (s *Store) Secret() string { return s.secretSrc }

// gatherKey is the job's gather key (fabric.Options.GatherKey), never 0
// (0 would check nothing). With a secret: the first 8 bytes of
// HMAC-SHA256(secret, "ddstore gather key v1"), the same on every rank
// that holds the secret, and nothing a stranger can compute without it.
// Without one (an insecure job): the first 8 bytes of
// SHA-256("ddstore insecure gather key v1" NUL job), where job is the
// identity every rank of the job shares (jobIdentity). That is no secret
// (anyone who knows the job's name computes it) but keeps jobs apart: a
// gather request of another job, or of a stale rank of an earlier one,
// is dropped and counted.
func gatherKey(secret []byte, job string) uint64 {
	var sum []byte
	if len(secret) > 0 {
		m := hmac.New(sha256.New, secret)
		m.Write([]byte("ddstore gather key v1"))
		sum = m.Sum(nil)
	} else {
		h := sha256.Sum256([]byte("ddstore insecure gather key v1\x00" + job))
		sum = h[:]
	}
	k := binary.LittleEndian.Uint64(sum)
	if k == 0 {
		k = 1
	}
	return k
}

// jobIdentity is what every rank of a job (and, when storage-only ranks
// join, of both launches) shares: the join's Storage.Job and Token, else
// the bootstrap's job token, which the ranks proved equal
// (bootstrap.JobTokenOf: DDSTORE_JOB_TOKEN, else the launcher's job id).
func jobIdentity(o *Options, jobToken string) string {
	if o.Role == RoleStorage || o.Storage.Ranks > 0 {
		return "storage:" + o.Storage.Job + "\x00" + o.Storage.Token
	}
	return "job:" + jobToken
}
