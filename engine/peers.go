package engine

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/engine/placement"
)

// pidWatcher watches same-node peers through pidfds (one goroutine, poll)
// and marks exited ranks in the dead set. Poll is retried on EINTR; if it
// fails otherwise, the watcher falls back to checking every watchRecheck
// (signal 0 through each pidfd) until stopped. A peer that has exited but
// is not yet reaped (a zombie) is seen by poll, by the fallback only once
// its parent reaps it.
type pidWatcher struct {
	dead   *placement.Health
	fds    []int32 // pidfds
	ranks  []int   // rank of fds[i]
	wakeR  int     // pipe read end, wakes poll on stop
	wakeW  int
	done   chan struct{}
	stopCh chan struct{} // closed by stop; ends the fallback loop
	closed sync.Once
	poll   func(fds []unix.PollFd, timeout int) (int, error) // unix.Poll; tests replace it
}

// watchRecheck is the period of the fallback check after poll fails.
const watchRecheck = 100 * time.Millisecond

// watchPeers starts the watcher for the given ranks and pids. Ranks whose
// pidfd cannot be opened are marked dead only if the process is gone
// (ESRCH); other failures (old kernel, permissions) leave them unwatched.
func watchPeers(dead *placement.Health, ranks, pids []int) (*pidWatcher, error) {
	return startWatcher(dead, ranks, pids, unix.Poll)
}

func startWatcher(dead *placement.Health, ranks, pids []int, poll func([]unix.PollFd, int) (int, error)) (*pidWatcher, error) {
	w := &pidWatcher{dead: dead, done: make(chan struct{}), stopCh: make(chan struct{}), poll: poll}
	for i, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err == unix.ESRCH {
			dead.MarkDead(ranks[i])
			continue
		}
		if err != nil {
			continue
		}
		w.fds = append(w.fds, int32(fd))
		w.ranks = append(w.ranks, ranks[i])
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		w.closeFDs()
		return nil, err
	}
	w.wakeR, w.wakeW = p[0], p[1]
	go w.run()
	return w, nil
}

func (w *pidWatcher) run() {
	defer close(w.done)
	pfd := make([]unix.PollFd, 0, len(w.fds)+1)
	live := make([]int, 0, len(w.fds)) // indices into fds still watched
	for i := range w.fds {
		live = append(live, i)
	}
	for len(live) > 0 {
		pfd = pfd[:0]
		pfd = append(pfd, unix.PollFd{Fd: int32(w.wakeR), Events: unix.POLLIN})
		for _, i := range live {
			pfd = append(pfd, unix.PollFd{Fd: w.fds[i], Events: unix.POLLIN})
		}
		_, err := w.poll(pfd, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// Never stop watching: dead peers would go unnoticed.
			w.recheck(live)
			return
		}
		if pfd[0].Revents != 0 {
			return
		}
		kept := live[:0]
		for j, i := range live {
			if pfd[j+1].Revents != 0 {
				w.dead.MarkDead(w.ranks[i])
				continue
			}
			kept = append(kept, i)
		}
		live = kept
	}
	<-w.stopCh // every peer is dead: nothing left to watch
}

// recheck is the fallback when poll fails: every watchRecheck, signal 0
// through each live pidfd (pid reuse cannot fool it) and mark the peers
// that have exited, until stop.
func (w *pidWatcher) recheck(live []int) {
	t := time.NewTicker(watchRecheck)
	defer t.Stop()
	for len(live) > 0 {
		kept := live[:0]
		for _, i := range live {
			if err := unix.PidfdSendSignal(int(w.fds[i]), 0, nil, 0); err == unix.ESRCH {
				w.dead.MarkDead(w.ranks[i])
				continue
			}
			kept = append(kept, i)
		}
		live = kept
		select {
		case <-w.stopCh:
			return
		case <-t.C:
		}
	}
	<-w.stopCh
}

func (w *pidWatcher) closeFDs() {
	for _, fd := range w.fds {
		unix.Close(int(fd))
	}
}

// stop ends the goroutine and closes the fds.
func (w *pidWatcher) stop() {
	if w == nil {
		return
	}
	w.closed.Do(func() {
		close(w.stopCh)
		unix.Write(w.wakeW, []byte{1})
		<-w.done
		w.closeFDs()
		unix.Close(w.wakeR)
		unix.Close(w.wakeW)
	})
}
