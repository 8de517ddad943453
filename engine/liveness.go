package engine

// Which ranks are alive, as the store learns it: the pid watcher (same
// node), the mesh's liveness (every other rank), failed reads, and
// MarkDead. Dead ranks are recorded in placement.Health, which every read
// consults, and told to the fabric, which cuts short the reads in flight
// to them (Health.OnDead, set in open).

// PeerDead reports whether rank is known to have exited or failed.
func (s *Store) PeerDead(rank int) bool { return rank >= 0 && rank < s.nranks && s.health.Dead(rank) }

// onDead is the mesh's report of a dead peer: reads of its rows fail at
// once from now on.
func (s *Store) onDead(rank int, cause error) {
	s.deadCause.LoadOrStore(rank, cause)
	s.health.MarkDead(rank)
}

// MarkDead declares rank dead (for example by a replica helper that gave
// up on it): reads of its rows fail at once with ErrPeerDead naming it and
// cause, and collectives fail naming it. Marking is permanent.
func (s *Store) MarkDead(rank int, cause error) {
	if rank < 0 || rank >= s.nranks || rank == s.rank {
		return
	}
	s.onDead(rank, cause)
	if cp := s.cp; cp != nil {
		cp.MarkDead(rank, cause)
	}
}

// Alive reports whether rank is not known dead: not exited (same-node
// ranks), not silent past the liveness deadline nor disconnected (every
// other rank, through the store's own connections), not marked dead.
func (s *Store) Alive(rank int) bool {
	return rank >= 0 && rank < s.nranks && (rank == s.rank || !s.health.Dead(rank))
}

// DeadRanks lists the ranks known dead, in order.
func (s *Store) DeadRanks() []int {
	var out []int
	for r := range s.nranks {
		if r != s.rank && s.health.Dead(r) {
			out = append(out, r)
		}
	}
	return out
}

// DeadCause is why rank was marked dead, nil when it is alive or the
// cause is unknown (a same-node exit seen by the pid watcher).
func (s *Store) DeadCause(rank int) error {
	if v, ok := s.deadCause.Load(rank); ok {
		return v.(error)
	}
	return nil
}
