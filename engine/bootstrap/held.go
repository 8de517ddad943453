package bootstrap

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/ddstore/ddstore/fault"
)

// held is what this process's exchangers hold. A tcp or dir rendezvous
// serves one exchanger per rank at a time (rank 0 listens on the tcp
// address; every rank writes its own files under the job's directory),
// and PMI serves one per process for good (the first exchanger takes the
// launcher's connection, PMI_FD, and finalizes it at Close). A second
// store opened on what an open one holds would otherwise fail with what
// the rendezvous makes of it (address in use, duplicate rank, PMI_FD not a
// socket); hold says what happened and what to do instead.
var held = struct {
	sync.Mutex
	by  map[string]bool // rendezvousName of each open tcp and dir exchanger
	pmi bool            // PMI_FD taken
}{by: map[string]bool{}}

// ownRendezvous is what to do instead: the options that give a store a
// rendezvous of its own.
const ownRendezvous = "open this store on a rendezvous of its own, the same on every rank: " +
	"another tcp address (Options.Method \"tcp\" with Options.Addr, or DDSTORE_BOOTSTRAP=tcp with " +
	"DDSTORE_BOOTSTRAP_ADDR) or a shared directory (Options.Method \"dir\" with Options.Dir, or " +
	"DDSTORE_BOOTSTRAP=dir with DDSTORE_BOOTSTRAP_DIR)"

// rendezvousName names what an exchanger of r holds, "" for pmi and single.
func rendezvousName(r resolved) string {
	switch r.method {
	case "tcp":
		return fmt.Sprintf("the tcp rendezvous %s as rank %d", r.Addr, r.Env.Rank)
	case "dir":
		return fmt.Sprintf("the directory rendezvous %s as rank %d", filepath.Join(r.Dir, r.Env.Job), r.Env.Rank)
	}
	return ""
}

// hold claims r's rendezvous for a new exchanger. release gives it back
// (at the exchanger's Close, or when Connect fails); PMI is never given
// back.
func hold(r resolved) (release func(), err error) {
	held.Lock()
	defer held.Unlock()
	op := opName(r.method, "connect")
	if r.method == "pmi" {
		if held.pmi {
			return nil, &fault.Error{Op: op, Kind: fault.ErrEnv, Side: fault.Local,
				Detail: "this process opened a store over the launcher's PMI before, and PMI serves one per process " +
					"(the first store took PMI_FD): " + ownRendezvous}
		}
		held.pmi = true
		return func() {}, nil
	}
	name := rendezvousName(r)
	if name == "" {
		return func() {}, nil
	}
	if held.by[name] {
		return nil, &fault.Error{Op: op, Kind: fault.ErrEnv, Side: fault.Local,
			Detail: fmt.Sprintf("a store of this process that is still open holds %s, and a rendezvous serves "+
				"one store per rank at a time: close that store first, or %s", name, ownRendezvous)}
	}
	held.by[name] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			held.Lock()
			delete(held.by, name)
			held.Unlock()
		})
	}, nil
}

// setRelease hands the exchanger what hold returned, for its Close.
func (c *collective) setRelease(f func()) { c.release = f }

// releaseRendezvous gives the rendezvous back (Close).
func (c *collective) releaseRendezvous() {
	if c.release != nil {
		c.release()
	}
}

func (c *collective) takeRelease() func() {
	f := c.release
	c.release = nil
	return f
}

// CloseKeepingRendezvous closes x but keeps what it holds of its
// rendezvous claimed for this process until release is called: a store
// done with the launcher's exchange after Open still owns that rendezvous
// until the store closes, so that a second store opened on it meanwhile
// is told what to do instead.
func CloseKeepingRendezvous(x Exchanger) (release func(), err error) {
	release = func() {}
	if c, ok := x.(interface{ takeRelease() func() }); ok {
		if f := c.takeRelease(); f != nil {
			release = f
		}
	}
	return release, x.Close()
}
