package fabric

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// stuckHold is how long reads from a peer whose read never returned (a
// quarantined reader blamed it: on shm, a stopped or killed peer holding its
// region's lock) fail at once instead of entering the provider again. After
// it, one try is allowed (the peer may have been resumed).
const stuckHold = 30 * time.Second

// stuckPeers are the peer addresses blamed by quarantined readers,
// process-wide. Readers notice a change through gen (one atomic load per
// chunk) and refresh their peers' flags.
var stuckPeers struct {
	mu  sync.Mutex
	at  map[string]time.Time
	gen atomic.Uint64
}

func markStuck(addr []byte) {
	stuckPeers.mu.Lock()
	if stuckPeers.at == nil {
		stuckPeers.at = map[string]time.Time{}
	}
	stuckPeers.at[string(addr)] = time.Now()
	stuckPeers.mu.Unlock()
	stuckPeers.gen.Add(1)
}

// forgetStuck clears the list (tests).
func forgetStuck() {
	stuckPeers.mu.Lock()
	clear(stuckPeers.at)
	stuckPeers.mu.Unlock()
	stuckPeers.gen.Add(1)
}

// checkStuck refreshes the reader's view of stuck peers when it changed.
func (r *Reader) checkStuck() {
	g := stuckPeers.gen.Load()
	if g == r.stuckGen {
		return
	}
	r.stuckGen = g
	stuckPeers.mu.Lock()
	for i := range r.peers {
		r.peers[i].stuckAt = stuckPeers.at[string(r.peers[i].addr)]
	}
	stuckPeers.mu.Unlock()
}

// stuckErr fails op i at once when its peer is held as stuck; nil otherwise.
func (r *Reader) stuckErr(pe *peerEntry, i int) error {
	if pe.stuckAt.IsZero() {
		return nil
	}
	ago := time.Since(pe.stuckAt)
	if ago >= stuckHold {
		return nil
	}
	return &fault.Error{Op: "read", Ranks: rankList(pe.rank), Side: fault.Remote, Kind: fault.ErrTimeout,
		Detail: "op " + strconv.Itoa(i) + ": an earlier read from this peer never returned " + ago.Round(time.Millisecond).String() +
			" ago (peer stopped or dead?); not entering the provider for it again for " + (stuckHold - ago).Round(time.Second).String()}
}
