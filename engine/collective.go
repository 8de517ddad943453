package engine

// The store's collectives among the trainers: Barrier, AllGather and
// AllReduceFloat32 over the store's own connections (engine/mesh; the
// launcher's exchange only bootstraps), each with a deadline.

import (
	"encoding/json"
	"fmt"
)

// gather JSON-encodes mine and all-gathers it under tag.
func (s *Store) gather(tag string, mine any) ([][]byte, error) {
	b, err := json.Marshal(mine)
	if err != nil {
		return nil, wrapf(ErrInvalid, tag, "", err, "encode")
	}
	return s.gatherBytes(tag, b)
}

// gatherBytes all-gathers this rank's bytes (one blob per rank, in rank
// order).
func (s *Store) gatherBytes(tag string, b []byte) ([][]byte, error) {
	blobs, err := s.ex.AllGather(tag, b, s.opts.Timeout)
	if err != nil {
		return nil, wrapBootstrap(tag, err)
	}
	if len(blobs) != s.world {
		return nil, errf(ErrMismatch, tag, "", "got %d records for %d ranks", len(blobs), s.world)
	}
	return blobs, nil
}

// wrapBootstrap names the store's collective tag around an exchange
// error; the exchange's *Error underneath carries the class and ranks.
func wrapBootstrap(tag string, err error) error {
	return &Error{Op: tag, Err: err}
}

// Barrier returns once every rank has called it (collective; deadline
// Options.Timeout). Use it, for example, after Update so that readers see
// the new rows.
func (s *Store) Barrier() error {
	s.collMu.Lock()
	defer s.collMu.Unlock()
	if s.closed.Load() {
		return errf(ErrClosed, "Barrier", "", "store closed")
	}
	if s.ex == nil && s.opts.Role == RoleStorage {
		return errStorageCollective()
	}
	s.seq++
	if err := s.ex.Barrier(fmt.Sprintf("barrier-%d", s.seq), s.opts.Timeout); err != nil {
		return wrapBootstrap("barrier", err)
	}
	return nil
}

// AllGather is collective: every rank passes its blob (any length, also
// empty) and gets every rank's blob, indexed by rank (its own included).
// Every rank must call it with the same tag, in the same order relative to
// the store's other collectives; a different tag or a different
// collective on another rank fails with ErrMismatch, a rank missing past
// Options.Timeout with ErrTimeout naming the ranks. After Close it returns
// ErrClosed. The returned blobs are the caller's.
func (s *Store) AllGather(tag string, mine []byte) ([][]byte, error) {
	return s.allGather("allgather", tag, mine)
}

// allGather runs one all-gather of the whole world under collMu; kind
// keeps different collectives apart in the exchanger's mismatch check.
func (s *Store) allGather(kind, tag string, mine []byte) ([][]byte, error) {
	s.collMu.Lock()
	defer s.collMu.Unlock()
	if s.closed.Load() {
		return nil, errf(ErrClosed, fmt.Sprintf("%s %q", kind, tag), "", "store closed")
	}
	if s.ex == nil && s.opts.Role == RoleStorage {
		return nil, errStorageCollective()
	}
	s.seq++
	what := fmt.Sprintf("%s %q", kind, tag)
	blobs, err := s.ex.AllGather(fmt.Sprintf("%s-%d-%s", kind, s.seq, tag), mine, s.opts.Timeout)
	if err != nil {
		return nil, wrapBootstrap(what, err)
	}
	if len(blobs) != s.world {
		return nil, errf(ErrMismatch, what, "", "got %d blobs for %d ranks", len(blobs), s.world)
	}
	return blobs, nil
}

// AllReduceFloat32 is collective: it replaces x, on every rank, by the
// element-wise sum of every rank's x. It runs over the store's own
// connections as a pipelined ring (mesh.Mesh.AllReduceFloat32): segment c
// of x (world equal parts) is summed in the fixed order
// ((x_c + x_{c+1}) + …) + x_{c−1} (mesh.SumStart), and every rank receives
// those bits, so all ranks get the same bits under any launcher. Every
// rank must pass the same tag and the same length (else ErrMismatch naming
// a rank; the store goes on working); a dead member fails it with
// ErrPeerDead naming the rank, a missing one with ErrTimeout after
// Options.Timeout. On error x is unchanged.
func (s *Store) AllReduceFloat32(tag string, x []float32) error {
	s.collMu.Lock()
	defer s.collMu.Unlock()
	if s.closed.Load() {
		return errf(ErrClosed, fmt.Sprintf("allreduce-f32 %q", tag), "", "store closed")
	}
	s.seq++
	if s.tree != nil {
		return s.treeAllReduce(fmt.Sprintf("allreduce-f32 %q", tag), fmt.Sprintf("%d-%s", s.seq, tag), x)
	}
	if s.mesh == nil {
		return nil // one rank: the sum is x
	}
	// The ring works in a copy, so that x stays as it was on error.
	if cap(s.reduceBuf) < len(x) {
		s.reduceBuf = make([]float32, len(x))
	}
	buf := s.reduceBuf[:len(x)]
	copy(buf, x)
	if err := s.mesh.AllReduceFloat32(fmt.Sprintf("%d-%s", s.seq, tag), buf, s.opts.Timeout); err != nil {
		return wrapBootstrap(fmt.Sprintf("allreduce-f32 %q", tag), err)
	}
	copy(x, buf)
	return nil
}
