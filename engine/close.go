package engine

// Closing the store: a collective Close that waits for reads in flight,
// unexports and unmaps the shards, and releases the fabric, the GPU and
// the telemetry segment.

import (
	"errors"
	"fmt"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// Close is collective: it waits for this rank's reads in flight, meets the
// other ranks at a barrier (so nobody reads this rank's memory any more),
// then stops telemetry, unmaps and removes the shard files and closes the
// fabric. After a failed collective (a timeout, a mismatch, a dead rank)
// no later collective works, and Close skips the barrier: it releases
// everything and returns nil; open a new store to go on. Resources are released even if the barrier fails (the error is
// returned). Later calls return ErrClosed. With Options.Profile, Close
// first writes this rank's profile table to Options.ProfileOutput.
//
// Nothing is released under a running call: if calls are still in flight
// when the wait's deadline (Options.Timeout) passes, Close returns
// ErrTimeout naming each such variable and its calls in flight, closes the
// bootstrap exchange, and leaves the variables, readers, telemetry and
// fabric to a background goroutine that releases them once the last call
// returns. Close itself returns within its deadlines either way.
func (s *Store) Close() error {
	s.collMu.Lock()
	defer s.collMu.Unlock()
	if s.closed.Swap(true) {
		return errf(ErrClosed, "Close", "", "Close called twice")
	}
	vm := *s.vars.Load()
	deadline := time.Now().Add(s.opts.Timeout)
	var errs []error
	var busy []*Var // still in the store, calls in flight
	for _, v := range vm {
		if err := v.waitIdle(deadline, "Close"); err != nil {
			errs = append(errs, err)
			busy = append(busy, v)
		}
	}
	// Variables freed while calls were in flight: wait for their release.
	s.lingerMu.Lock()
	lingering := make([]*Var, 0, len(s.linger))
	for v := range s.linger {
		lingering = append(lingering, v)
	}
	s.lingerMu.Unlock()
	var pending []*Var // freed, release still waiting for calls
	for _, v := range lingering {
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-v.released:
		case <-t.C:
			errs = append(errs, &Error{Op: "Close", Var: v.name, Kind: ErrTimeout, Side: fault.Local,
				Detail: fmt.Sprintf("freed variable %q: %d calls still in flight; it is released when they return",
					v.name, v.inflight.Load())})
			pending = append(pending, v)
		}
		t.Stop()
	}
	if s.opts.Profile {
		s.writeProfile(s.opts.ProfileOutput)
	}
	if s.opts.Role == RoleStorage {
		// Nothing reads a storage rank once the trainers closed the job
		// (Serve): no barrier among the storage ranks, some may be dead.
	} else if s.cp != nil && s.cp.Broken() != nil {
		// A collective failed earlier and every rank still connected was
		// told: no barrier can succeed now. Close releases all the same
		// (the failure was returned when it happened).
	} else if err := s.closeBarrier(); err != nil {
		errs = append(errs, wrapBootstrap("close barrier", err))
	}
	if s.opts.Role != RoleStorage {
		// Every trainer is done reading: let the storage ranks go.
		if err := s.leaveStorage(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(busy) == 0 && len(pending) == 0 {
		if err := s.release(); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	// Calls in flight use the variables' memory, the readers' endpoints,
	// the fabric and the telemetry segment: release those after the last
	// call. The exchange is no reader's: close it now.
	if err := s.closeExchange(); err != nil {
		errs = append(errs, err)
	}
	go func() {
		for _, v := range busy {
			for v.inflight.Load() != 0 {
				time.Sleep(time.Millisecond)
			}
		}
		for _, v := range pending {
			<-v.released
		}
		_ = s.release() // nobody is left to report an error to
	}()
	return errors.Join(errs...)
}

// Abandon is for a process about to end after an error or an interrupt,
// when the other ranks are not at a Close to meet: it removes what would
// outlive the process (the telemetry segment, this rank's shard files)
// without a barrier and without waiting for calls in flight; the rest goes
// with the process. The store is closed after it: Close and every other
// call return ErrClosed. It returns the first removal's failure.
func (s *Store) Abandon() error {
	if s.closed.Swap(true) {
		return errf(ErrClosed, "Abandon", "", "store already closed")
	}
	var errs []error
	if s.tel != nil {
		// Close maps anonymous memory over the segment: a call still
		// recording into it writes there, harmlessly.
		if err := s.tel.Close(); err != nil {
			errs = append(errs, wrapf(nil, "Abandon", "", err, "telemetry"))
		}
	}
	for _, sh := range s.stored {
		sh.own.unlink()
	}
	if p := s.vars.Load(); p != nil {
		for _, v := range *p {
			v.own.unlink()
		}
	}
	return errors.Join(errs...)
}

// release frees everything this store holds; used by Close and failed Open.
func (s *Store) release() error {
	s.closed.Store(true)
	var errs []error
	if s.hbStop != nil {
		close(s.hbStop)
		<-s.hbDone
		s.hbStop = nil
	}
	s.readersMu.Lock()
	for r := range s.readers {
		if err := r.release(); err != nil {
			errs = append(errs, err)
		}
	}
	s.readers = map[*Reader]struct{}{}
	s.readersMu.Unlock()
	if p := s.vars.Load(); p != nil {
		for _, v := range *p {
			if err := v.release(); err != nil {
				errs = append(errs, err)
			}
		}
		empty := varMap{}
		s.vars.Store(&empty)
	}
	if err := s.gpu.close(); err != nil {
		errs = append(errs, err)
	}
	if s.tel != nil {
		if err := s.tel.Close(); err != nil {
			errs = append(errs, wrapf(nil, "Close", "", err, "telemetry"))
		}
	}
	s.watcher.stop()
	s.swatcher.stop()
	for _, sh := range s.stored {
		if sh.exp != nil {
			if err := sh.exp.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		if err := sh.own.close(); err != nil {
			errs = append(errs, err)
		}
	}
	s.stored = nil
	if s.jx != nil {
		s.jx.Close()
		s.jx = nil
	}
	if s.fab != nil {
		if err := s.fab.Close(); err != nil {
			errs = append(errs, wrapf(nil, "Close", "", err, "fabric"))
		}
	}
	if err := s.closeExchange(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// closeExchange closes the control plane and the launcher's exchange.
func (s *Store) closeExchange() error {
	var errs []error
	if s.cp != nil {
		if err := s.cp.Close(); err != nil {
			errs = append(errs, wrapf(nil, "Close", "", err, "control plane"))
		}
		s.cp, s.mesh, s.tree = nil, nil, nil
	} else if s.mesh != nil {
		if err := s.mesh.Close(); err != nil {
			errs = append(errs, wrapf(nil, "Close", "", err, "mesh"))
		}
		s.mesh = nil
	}
	if s.boot != nil {
		if err := s.boot.Close(); err != nil {
			errs = append(errs, wrapf(nil, "Close", "", err, "bootstrap"))
		}
		s.boot = nil
	}
	if s.releaseRendezvous != nil {
		s.releaseRendezvous()
		s.releaseRendezvous = nil
	}
	s.ex = nil
	return errors.Join(errs...)
}

// closeBarrier is Close's barrier. The ranks this store gave up on (dead
// to a read, which the health knows and the control plane may not; or
// whose read timed out and failed the caller) go to the control plane
// first: the barrier then fails at once and tells every rank which rank
// failed, rather than leaving the others to blame this rank, whose part of
// "close" reaches them in another collective (a collective mismatch: make
// test-netns-tree step 2, a survivor's read timed out on a cut host).
func (s *Store) closeBarrier() error {
	if s.cp != nil {
		mark := func(r int, cause error) {
			if r >= 0 && r < s.world && r != s.rank { // storage ranks are no member
				s.cp.MarkDead(r, cause)
			}
		}
		for _, r := range s.DeadRanks() {
			cause := s.DeadCause(r)
			if cause == nil {
				cause = fmt.Errorf("rank %d found dead by rank %d", r, s.rank)
			}
			mark(r, cause)
		}
		s.timedOut.Range(func(k, v any) bool { mark(k.(int), v.(error)); return true })
	}
	return s.ex.Barrier("close", s.opts.Timeout)
}
