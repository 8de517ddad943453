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

// gatherKey is the job's gather key (fabric.Options.GatherKey): the first
// 8 bytes of HMAC-SHA256(secret, "ddstore gather key v1"), the same on
// every rank that holds the secret, and nothing a stranger can compute
// without it. 0 (no check) without a secret; never 0 with one.
func gatherKey(secret []byte) uint64 {
	if len(secret) == 0 {
		return 0
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ddstore gather key v1"))
	k := binary.LittleEndian.Uint64(m.Sum(nil))
	if k == 0 {
		k = 1
	}
	return k
}
