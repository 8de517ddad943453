package engine

// Ending a process after Ctrl-C so that its launcher reports an interrupt.

import (
	"os"
	"os/signal"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/engine/bootstrap"
)

// InterruptExitCode is the exit code of a rank that ends by Ctrl-C under
// MPICH's mpiexec (128 + SIGINT, as a shell reports it).
const InterruptExitCode = 130

// EndOnInterrupt makes Ctrl-C (SIGINT) end this process the way its
// launcher reports as an interrupt: it abandons the given stores (their
// telemetry segments and shard files removed, no barrier) and then calls
// EndInterrupted. A Go program that has no SIGINT handling of its own
// calls it after Open; the returned stop gives SIGINT back (call it
// before Close). Calls that were under way fail with ErrClosed once a
// store is abandoned: a program that then returns calls stop first, and
// stop, called once the interrupt's end has begun, waits for the process
// to end there (at most interruptEndWait) instead of returning, so that no
// error of the program's own is reported and the exit is the interrupt's.
// stop may be called more than once. Without it a Go rank ends by SIGINT
// through the Go runtime, which under mpiexec is reported as an interrupt
// only when every rank ended before mpiexec looked (see README, Ctrl-C).
func EndOnInterrupt(stores ...*Store) (stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt)
	done := make(chan struct{})
	ending := make(chan struct{})
	go func() {
		select {
		case <-c:
		case <-done:
			return
		}
		close(ending)
		for _, s := range stores {
			_ = s.Abandon() // ErrClosed when already closed; the exit goes on
		}
		EndInterrupted()
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(c)
			close(done)
		})
		select {
		case <-ending:
			time.Sleep(interruptEndWait) // the process ends meanwhile
		default:
		}
	}
}

// interruptEndWait bounds EndOnInterrupt's stop's wait for the end.
const interruptEndWait = 5 * time.Second

// EndInterrupted ends this process after an interrupt; it does not
// return. Under MPICH's mpiexec it exits with InterruptExitCode (see
// ExitUnderHydra); under any other launcher it ends by SIGINT, as a C
// program does on Ctrl-C.
func EndInterrupted() {
	ExitUnderHydra(InterruptExitCode)
	EndBySignal(unix.SIGINT)
}

// EndBySignal ends this process by sig, as a C program ends by a signal it
// does not handle, so that its parent sees it killed by sig; it does not
// return. sig's action is set to the default with rt_sigaction directly:
// signal.Reset would give a process that loaded the engine as a C library
// (Python) its own handler back, and that handler would only note the
// signal. Should the process survive (sig blocked), it exits with 128+sig.
func EndBySignal(sig unix.Signal) {
	var act [4]uint64 // struct sigaction: SIG_DFL (0), no flags, no restorer, empty mask
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	_ = unix.Kill(os.Getpid(), sig)
	time.Sleep(time.Second) // sig ends the process meanwhile
	os.Exit(128 + int(sig))
}

// ExitUnderHydra exits with code when this process is a rank of MPICH's
// mpiexec (Hydra), and returns otherwise. Hydra's proxy on a node
// (MPICH 4.0, pm/pmiserv/pmip.c) takes a rank's exit status only for a
// rank it reaps while another of the node's output pipes is still open,
// and it looks for an exited rank (one waitpid) only after an event on
// those pipes; it records 0 for a rank reaped later, after Ctrl-C. As
// soon as it reaps a rank that ended by a signal, it SIGKILLs the ranks
// still running and ORs their statuses into the job's (2 | 9 = "signal
// 11"). So a rank ends after Ctrl-C by a plain exit (no signal: no rank
// is killed), and a small shell (holdOutput) keeps this rank's stdout and
// stderr open past its exit: once the rank has exited the shell closes
// stdout, which is the event on which the proxy reaps it, and it closes
// stderr once the rank is reaped. Every rank's exit status is then
// taken, and mpiexec exits with code. Use it with a code other than 0.
func ExitUnderHydra(code int) {
	env, err := bootstrap.DetectEnv()
	if err != nil || env.Launcher != "hydra" {
		return
	}
	holdOutput()
	os.Exit(code)
}

// holdScript is holdOutput's shell: $1 is the rank's pid. It waits (at
// most about 2 s) until the rank can be reaped (a zombie whose threads
// have all ended) or is gone, closes its stdout, waits (at most about
// 3 s) until the rank is reaped, then exits, closing stderr. The main
// thread of a process is a zombie while its other threads still end
// (/proc/PID/task lists them); an event before the proxy can reap would
// find nothing to reap, and one fewer rank would be reaped with its
// status. /proc/PID/stat's third field is the state; the second, the
// command name in parentheses, may hold spaces.
const holdScript = `p=$1 i=0
state() {
  s=; { read -r s < /proc/$p/stat; } 2>/dev/null; s=${s##*) }; st=${s%% *}
  if [ "$st" = Z ]; then set -- /proc/$p/task/*; [ $# -le 1 ] || st=T; fi
}
state
while [ -n "$st" ] && [ "$st" != Z ] && [ $i -lt 200 ]; do sleep 0.01; i=$((i+1)); state; done
exec 1>/dev/null
i=0
while [ -e /proc/$p ] && [ $i -lt 300 ]; do sleep 0.01; i=$((i+1)); done
`

// holdOutput starts holdScript with this process's stdout and stderr and
// no other file: Hydra's proxy starts each rank with second copies of
// its stdout and stderr pipes (and the read ends of earlier ranks')
// open and inheritable, so a shell that inherited them would keep the
// pipes open after closing its stdout and the proxy would see no event
// (each shell then ran into its deadlines: jobs ended 11-18 s after
// Ctrl-C). When /bin/sh cannot start, the exit goes on without it.
func holdOutput() {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return
	}
	defer null.Close()
	closeOnExecAbove(2)
	p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", holdScript, "ddstore-hold", strconv.Itoa(os.Getpid())},
		&os.ProcAttr{Files: []*os.File{null, os.Stdout, os.Stderr}})
	if err == nil {
		_ = p.Release()
	}
}

// closeOnExecAbove marks every open file descriptor above fd close-on-exec,
// so that a process started next inherits only what it is given. The
// process exits right after: no descriptor of its own needs keeping.
func closeOnExecAbove(fd int) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	_ = d.Close()
	for _, n := range names {
		if v, err := strconv.Atoi(n); err == nil && v > fd {
			unix.CloseOnExec(v)
		}
	}
}
