// Package launch starts the ranks of a job on this machine, like
// `mpirun -n N` on one node, for tests, examples and laptops: it picks a
// free loopback port and gives every rank the torchrun-style environment
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
// plus DDSTORE_JOB and DDSTORE_JOB_TOKEN, which engine/bootstrap reads. It
// forwards signals, passes output through (optionally prefixed with the
// rank), and when one rank fails it stops the others and names the rank.
// cmd/ddrun is its command-line front end.
package launch

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/fault"
)

// Errors of Run, for errors.Is; ErrTimeout and ErrInvalid belong to
// fault's classes of the same name.
var (
	// ErrRankFailed: a rank exited non-zero or was killed; the error is a *RankError.
	ErrRankFailed = errors.New("launch: rank failed")
	// ErrTimeout: Spec.Timeout passed before every rank exited.
	ErrTimeout = fault.Sentinel("launch: timeout", fault.ErrTimeout)
	// ErrInterrupted: a signal was forwarded to the ranks, or ctx was canceled.
	ErrInterrupted = errors.New("launch: interrupted")
	// ErrInvalid: a Spec that Validate refuses.
	ErrInvalid = fault.Sentinel("launch: invalid spec", fault.ErrInvalid)
)

// Spec describes one local job.
type Spec struct {
	N    int      // number of ranks, ≥ 1 (required)
	Prog string   // program to run (required); looked up in PATH
	Args []string // its arguments
	Env  []string // extra "KEY=VALUE" for every rank; they override the ones set here
	Dir  string   // working directory; default the current one
	// Timeout bounds the whole job; 0 = none. On expiry the ranks get
	// SIGTERM, then SIGKILL after Grace.
	Timeout time.Duration
	// Grace is how long the other ranks may run on after the first failure
	// before SIGTERM, and after SIGTERM before SIGKILL. Default 2s.
	Grace time.Duration
	// Prefix prepends "[rank N] " to every line of output.
	Prefix bool
	// Stdout and Stderr receive the ranks' output. Default os.Stdout, os.Stderr.
	Stdout, Stderr io.Writer
	// Signals received on this channel are forwarded to every rank (ddrun
	// passes its SIGINT and SIGTERM); Run then returns ErrInterrupted.
	Signals <-chan os.Signal
	// Host is MASTER_ADDR and where the port is picked. Default 127.0.0.1.
	Host string
}

// DefaultGrace is Spec.Grace when zero.
const DefaultGrace = 2 * time.Second

// Validate checks the spec; a refused spec is ErrInvalid.
func (s Spec) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, a...)...)
	}
	switch {
	case s.N < 1:
		return bad("N = %d, want ≥ 1 ranks", s.N)
	case s.N > 4096:
		return bad("N = %d ranks on one machine is too many (limit 4096)", s.N)
	case s.Prog == "":
		return bad("no program given")
	case s.Timeout < 0 || s.Grace < 0:
		return bad("negative Timeout or Grace")
	}
	for _, kv := range s.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return bad("env entry %q is not KEY=VALUE", kv)
		}
	}
	return nil
}

// RankError reports the first rank that failed.
type RankError struct {
	Rank   int
	Code   int    // exit status; -1 when killed by a signal
	Signal string // the signal that killed it, if any
	Others []int  // other ranks that failed on their own afterwards
	Err    error  // start error, if the rank never ran
}

func (e *RankError) Error() string {
	var msg string
	switch {
	case e.Err != nil:
		msg = fmt.Sprintf("rank %d: %v", e.Rank, e.Err)
	case e.Signal != "":
		msg = fmt.Sprintf("rank %d was killed by %s", e.Rank, e.Signal)
	default:
		msg = fmt.Sprintf("rank %d exited with status %d", e.Rank, e.Code)
	}
	if len(e.Others) > 0 {
		msg += fmt.Sprintf(" (then ranks %v failed too)", e.Others)
	}
	return "launch: " + msg
}

func (e *RankError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrRankFailed, e.Err}
	}
	return []error{ErrRankFailed}
}

// InterruptError is ErrInterrupted by a signal forwarded to the ranks.
type InterruptError struct{ Signal syscall.Signal }

func (e *InterruptError) Error() string {
	return fmt.Sprintf("%v: forwarded %v to the ranks", ErrInterrupted, e.Signal)
}

func (e *InterruptError) Unwrap() error { return ErrInterrupted }

// ExitCode is the status a launcher should exit with for err: 0 for nil,
// the failing rank's status, 128+signal for a killed rank or a forwarded
// signal (130 for Ctrl-C, 143 for SIGTERM, as a shell reports a program
// the signal ended), 130 for another interrupt, else 1.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	var re *RankError
	if errors.As(err, &re) {
		if re.Code > 0 {
			return re.Code
		}
	}
	var ie *InterruptError
	if errors.As(err, &ie) {
		return 128 + int(ie.Signal)
	}
	if errors.Is(err, ErrInterrupted) {
		return 130
	}
	return 1
}

// FreePort returns a TCP port that was free on host a moment ago. It is
// picked at random below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), so that no outgoing connection and no
// ":0" listener of another process can take it before the rank binds it:
// a port from ":0" was taken that way under load (bind: address already
// in use). Where that range leaves no room, it asks the kernel for one.
func FreePort(host string) (int, error) {
	if lo := ephemeralLow(); lo-minPickedPort >= 1000 {
		for range 64 {
			p := minPickedPort + mrand.IntN(lo-minPickedPort)
			if l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p))); err == nil {
				l.Close()
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// minPickedPort: FreePort stays above the well-known service ports.
const minPickedPort = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default 32768 where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > 0 {
				return lo
			}
		}
	}
	return 32768
}

// inherited launcher variables that would make a rank believe it belongs to
// an outer job (PMI_FD in particular would select the pmi method).
func dropInherited(k string) bool {
	for _, p := range []string{"PMI_", "PMIX_", "OMPI_COMM_WORLD_", "MPI_LOCAL", "TORCHELASTIC_"} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// RankEnv is the environment Run gives rank r (after the parent's own).
func RankEnv(r, n int, host string, port int, job, token, secret string) []string {
	return []string{
		"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + strconv.Itoa(n),
		"LOCAL_RANK=" + strconv.Itoa(r), "LOCAL_WORLD_SIZE=" + strconv.Itoa(n),
		"MASTER_ADDR=" + host, "MASTER_PORT=" + strconv.Itoa(port),
		"DDSTORE_JOB=" + job, "DDSTORE_JOB_TOKEN=" + token,
		// The job's secret (engine/auth): the random token, or the user's
		// own DDSTORE_TOKEN; the ranks' environments are readable only by
		// this user.
		"DDSTORE_TOKEN=" + secret,
	}
}

type exit struct {
	rank int
	err  error
}

// Run starts s.N ranks and waits for all of them. It returns nil when every
// rank exits 0; a *RankError (ErrRankFailed) naming the first rank that
// failed, after stopping the others; ErrTimeout; or ErrInterrupted.
func Run(ctx context.Context, s Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Grace == 0 {
		s.Grace = DefaultGrace
	}
	if s.Host == "" {
		s.Host = "127.0.0.1"
	}
	if s.Stdout == nil {
		s.Stdout = os.Stdout
	}
	if s.Stderr == nil {
		s.Stderr = os.Stderr
	}
	prog, err := exec.LookPath(s.Prog)
	if err != nil {
		// No rank can start: report it as rank 0's start error, as c.Start
		// would (errors.Is fs.ErrNotExist / fs.ErrPermission hold).
		return &RankError{Rank: 0, Code: -1, Err: err}
	}
	port, err := FreePort(s.Host)
	if err != nil {
		return fmt.Errorf("launch: no free port on %s: %w", s.Host, err)
	}
	var tok [16]byte
	rand.Read(tok[:])
	job := fmt.Sprintf("local-%d-%d", os.Getpid(), time.Now().UnixNano())
	token := hex.EncodeToString(tok[:])
	// A secret the user gave (DDSTORE_TOKEN) is kept: two launches that
	// meet (a storage join) need the same one.
	secret := token
	if l, err := configs.ReadLaunch(); err == nil && l.Token != "" {
		secret = l.Token
	}

	var base []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !dropInherited(k) {
			base = append(base, kv)
		}
	}
	stdout, stderr := syncWriter(s.Stdout), syncWriter(s.Stderr)
	if s.Stdout == s.Stderr {
		stderr = stdout
	}
	var flush []*prefixWriter
	cmds := make([]*exec.Cmd, s.N)
	exits := make(chan exit, s.N)
	for r := range s.N {
		c := exec.Command(prog, s.Args...)
		c.Dir = s.Dir
		c.Env = append(append(append([]string{}, base...), RankEnv(r, s.N, s.Host, port, job, token, secret)...), s.Env...)
		c.Stdout, c.Stderr = stdout, stderr
		if s.Prefix {
			po, pe := newPrefixWriter(stdout, r), newPrefixWriter(stderr, r)
			c.Stdout, c.Stderr = po, pe
			flush = append(flush, po, pe)
		}
		c.SysProcAttr = sysProcAttr() // own process group: signal the rank and its children together
		c.WaitDelay = time.Second
		if err := c.Start(); err != nil {
			for _, started := range cmds[:r] {
				killGroup(started, syscall.SIGKILL)
				started.Wait()
			}
			return &RankError{Rank: r, Code: -1, Err: err}
		}
		cmds[r] = c
		go func() { exits <- exit{rank: r, err: c.Wait()} }()
	}

	var (
		first     *RankError
		others    []int
		cause     error // ErrTimeout or ErrInterrupted
		running   = s.N
		stopping  bool
		termTimer <-chan time.Time // after a failure: SIGTERM the rest
		killTimer <-chan time.Time // after SIGTERM: SIGKILL the rest
		jobTimer  <-chan time.Time
	)
	if s.Timeout > 0 {
		t := time.NewTimer(s.Timeout)
		defer t.Stop()
		jobTimer = t.C
	}
	exited := make([]bool, s.N)
	signalAll := func(sig syscall.Signal) {
		for r, c := range cmds {
			if !exited[r] {
				killGroup(c, sig)
			}
		}
	}
	terminate := func() {
		if !stopping {
			stopping = true
			signalAll(syscall.SIGTERM)
			killTimer = time.After(s.Grace)
		}
	}
	done := ctx.Done()
	for running > 0 {
		select {
		case e := <-exits:
			running--
			exited[e.rank] = true
			if e.err == nil {
				continue
			}
			re := rankError(e.rank, e.err)
			switch {
			case first == nil && cause == nil && !stopping:
				first = re
				termTimer = time.After(s.Grace)
			case first != nil && !stopping:
				others = append(others, e.rank)
			}
		case <-termTimer:
			termTimer = nil
			terminate()
		case <-killTimer:
			killTimer = nil
			signalAll(syscall.SIGKILL)
		case <-jobTimer:
			jobTimer = nil
			if cause == nil && first == nil {
				cause = fmt.Errorf("%w: ranks still running after %v", ErrTimeout, s.Timeout)
			}
			terminate()
		case <-done:
			done = nil
			if cause == nil && first == nil {
				cause = fmt.Errorf("%w: %v", ErrInterrupted, context.Cause(ctx))
			}
			terminate()
		case sig := <-s.Signals:
			if cause == nil && first == nil {
				cause = fmt.Errorf("%w: forwarded %v to the ranks", ErrInterrupted, sig)
				if ss, ok := sig.(syscall.Signal); ok {
					cause = &InterruptError{Signal: ss}
				}
			}
			if ss, ok := sig.(syscall.Signal); ok {
				signalAll(ss)
			}
			if killTimer == nil {
				killTimer = time.After(s.Grace) // then make sure they go
			}
		}
	}
	for _, p := range flush {
		p.Flush()
	}
	if first != nil {
		sort.Ints(others)
		first.Others = others
		return first
	}
	return cause
}

func rankError(r int, err error) *RankError {
	re := &RankError{Rank: r, Code: -1}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			re.Signal = ws.Signal().String()
			return re
		}
		re.Code = ee.ExitCode()
		return re
	}
	re.Err = err
	return re
}

func killGroup(c *exec.Cmd, sig syscall.Signal) {
	if c == nil || c.Process == nil {
		return
	}
	if err := syscall.Kill(-c.Process.Pid, sig); err != nil {
		c.Process.Signal(sig)
	}
}

// syncWriter serialises writes of several ranks to one writer; *os.File is
// passed as is (the ranks then write to the descriptor directly).
func syncWriter(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// prefixWriter writes whole lines, each prefixed with "[rank N] ", to a
// shared writer. Whole lines go out in one Write, so lines of different
// ranks never interleave.
type prefixWriter struct {
	mu     sync.Mutex
	out    io.Writer
	prefix []byte
	buf    []byte
}

var outMu sync.Mutex // one line at a time across all ranks and streams

func newPrefixWriter(out io.Writer, rank int) *prefixWriter {
	return &prefixWriter{out: out, prefix: []byte(fmt.Sprintf("[rank %d] ", rank))}
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.buf = append(p.buf, b...)
			if len(p.buf) > 64<<10 { // a very long line: emit what we have
				p.emit(append(p.buf, '\n'))
				p.buf = p.buf[:0]
			}
			break
		}
		line := append(p.buf, b[:i+1]...)
		p.emit(line)
		p.buf = p.buf[:0]
		b = b[i+1:]
	}
	return n, nil
}

func (p *prefixWriter) emit(line []byte) {
	out := make([]byte, 0, len(p.prefix)+len(line))
	out = append(append(out, p.prefix...), line...)
	outMu.Lock()
	p.out.Write(out)
	outMu.Unlock()
}

// Flush writes a last line without newline.
func (p *prefixWriter) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.buf) > 0 {
		p.emit(append(p.buf, '\n'))
		p.buf = p.buf[:0]
	}
}
