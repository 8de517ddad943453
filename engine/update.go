package engine

// Changing and ending a variable: Update (local) and Free (collective),
// which waits for reads in flight before it unmaps the shards.

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ddstore/ddstore/fault"
)

// Update overwrites rows of this rank's shard starting at local row
// localOffset (local, not collective). Readers may see a row half-written
// while Update runs; synchronize (e.g. a barrier of your own) if that matters.
func (s *Store) Update(name string, rows []byte, localOffset int64) error {
	v, err := s.acquire("Update", name)
	if err != nil {
		return err
	}
	defer v.inflight.Add(-1)
	if err := v.checkUpdate("Update", rows, localOffset); err != nil {
		return err
	}
	copy(v.own.data[localOffset*v.rowBytes:], rows)
	return nil
}

// checkUpdate checks that rows are whole rows that fit in the local shard
// at localOffset.
func (v *Var) checkUpdate(op string, rows []byte, localOffset int64) error {
	if v.storage {
		return errf(ErrInvalid, op, v.name, "the variable is held by storage ranks; this rank has no shard of it")
	}
	if int64(len(rows))%v.rowBytes != 0 {
		return errf(ErrDType, op, v.name, "%d bytes is not a multiple of the row size %d", len(rows), v.rowBytes)
	}
	n := int64(len(rows)) / v.rowBytes
	// n ≤ nLocal first, so that nLocal-n cannot overflow (nor localOffset+n).
	if localOffset < 0 || n > v.nLocal || localOffset > v.nLocal-n {
		return errf(ErrIndex, op, v.name, "%d rows at local row %d outside the local shard [0,%d)",
			n, localOffset, v.nLocal)
	}
	return nil
}

// Free removes variable name on every rank (collective). All ranks must
// name the same variable; otherwise every rank returns ErrMismatch and the
// variable stays.
//
// Free waits (deadline Options.Timeout) for this rank's calls on the
// variable still in flight. A variable is never released under a running
// call: if calls are still in flight at the deadline, Free returns
// ErrTimeout naming the variable and the number of calls, the variable is
// gone from the store (new calls fail with ErrUnknownVar), and its memory
// is released by a background goroutine once the last call returns (every
// call ends: mapped copies are finite and fabric reads have deadlines).
func (s *Store) Free(name string) error {
	s.collMu.Lock()
	defer s.collMu.Unlock()
	if s.closed.Load() {
		return errf(ErrClosed, "Free", name, "store closed")
	}
	if s.ex == nil && s.opts.Role == RoleStorage {
		return errStorageCollective()
	}
	s.seq++
	tag := fmt.Sprintf("coll-%d", s.seq)
	v := (*s.vars.Load())[name]
	me := varMeta{Op: "free", Name: name}
	var localErr error
	if v == nil {
		localErr = errf(ErrUnknownVar, "Free", name, "no such variable")
		me.Err = localErr.Error()
	} else {
		me.DType, me.RowElems, me.RowBytes = v.dt, v.rowElems, v.rowBytes
	}
	blobs, err := s.gather(tag, me)
	if err != nil {
		return wrapf(nil, "Free", name, err, "exchange")
	}
	metas := make([]varMeta, s.world)
	for r, b := range blobs {
		if err := json.Unmarshal(b, &metas[r]); err != nil {
			return &Error{Op: "Free", Var: name, Kind: ErrMismatch, Ranks: []int{r}, Detail: "bad record", Err: err}
		}
	}
	if err := checkAgreement(metas, s.rank, localErr); err != nil {
		return err
	}
	s.publish(func(m varMap) { delete(m, name) })
	var errs []error
	idleErr := v.waitIdle(time.Now().Add(s.opts.Timeout), "Free")
	if idleErr != nil {
		errs = append(errs, idleErr)
	}
	if err := s.ex.Barrier(tag+"-done", s.opts.Timeout); err != nil {
		errs = append(errs, wrapBootstrap("Free", err))
	}
	if idleErr != nil {
		s.releaseWhenIdle(v)
	} else if err := v.release(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// waitIdle marks the variable freed and waits for calls in flight until
// deadline; on timeout it returns ErrTimeout naming the variable and the
// calls still in flight (op names the caller: Free or Close).
func (v *Var) waitIdle(deadline time.Time, op string) error {
	v.freed.Store(true)
	for {
		n := v.inflight.Load()
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return &Error{Op: op, Var: v.name, Kind: ErrTimeout, Side: fault.Local,
				Detail: fmt.Sprintf("%d calls still in flight; it is released when they return", n)}
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// releaseWhenIdle hands a variable whose calls outlived Free's deadline to
// a goroutine that releases it after the last call returns. The store
// tracks it until then, so that Close does not close the fabric or the
// telemetry segment under those calls. collMu is held.
func (s *Store) releaseWhenIdle(v *Var) {
	v.released = make(chan struct{})
	s.lingerMu.Lock()
	if s.linger == nil {
		s.linger = map[*Var]struct{}{}
	}
	s.linger[v] = struct{}{}
	s.lingerMu.Unlock()
	go func() {
		for v.inflight.Load() != 0 {
			time.Sleep(time.Millisecond)
		}
		_ = v.release() // nobody is left to report an error to
		s.lingerMu.Lock()
		delete(s.linger, v)
		s.lingerMu.Unlock()
		close(v.released)
	}()
}

// release unmaps, unexports and removes the variable's resources. No call
// may be in flight (waitIdle returned nil, or releaseWhenIdle waited).
func (v *Var) release() error {
	v.freed.Store(true)
	var errs []error
	if v.shared != nil {
		v.mu.Lock()
		v.shared.close()
		v.shared = nil
		v.mu.Unlock()
	}
	if v.s.tel != nil && v.telID >= 0 {
		v.s.tel.RemoveVar(int(v.telID))
		v.telID = -1
	}
	for _, f := range v.mapped {
		if err := f.close(); err != nil {
			errs = append(errs, err)
		}
	}
	v.mapped = nil
	if v.exp != nil {
		if err := v.exp.Close(); err != nil {
			errs = append(errs, wrapf(nil, "release", v.name, err, "unexport"))
		}
		v.exp = nil
	}
	if err := v.own.close(); err != nil {
		errs = append(errs, err)
	}
	clear(v.src)
	return errors.Join(errs...)
}
