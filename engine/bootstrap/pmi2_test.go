package bootstrap

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ddstore/ddstore/internal/testkit"
)

// pmi2Server is an in-test PMI-2 server as Slurm's mpi/pmi2 plugin speaks
// it: PMI-1 style init line, then length-prefixed commands; kvs-put goes
// to a pending set that kvs-fence (a barrier of every rank) commits.
type pmi2Server struct {
	n     int
	jobid string

	mu      sync.Mutex
	cond    *sync.Cond
	pending map[string]string
	kvs     map[string]string
	arrived int
	gen     int
	seen    map[string]int // commands served, by name
	errs    []string
	gone    bool // abandon: no rank will come to a fence any more
}

// abandon wakes every rank waiting in a fence for good: each fails the
// test and ends its connection (runPMI2 calls it once every client exited).
func (s *pmi2Server) abandon() {
	s.mu.Lock()
	s.gone = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

func newPMI2Server(n int, jobid string) *pmi2Server {
	s := &pmi2Server{n: n, jobid: jobid, pending: map[string]string{}, kvs: map[string]string{}, seen: map[string]int{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *pmi2Server) fail(format string, args ...any) {
	s.mu.Lock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
	s.mu.Unlock()
}

func (s *pmi2Server) serve(c net.Conn, rank int) {
	defer c.Close()
	rd := bufio.NewReader(c)
	line, err := rd.ReadString('\n')
	if err != nil {
		s.fail("rank %d: init: %v", rank, err)
		return
	}
	if strings.TrimSpace(line) != "cmd=init pmi_version=2 pmi_subversion=0" {
		s.fail("rank %d: init line %q", rank, line)
		return
	}
	c.Write([]byte("cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n"))
	reply := func(body string) { c.Write([]byte(fmt.Sprintf("%-6d%s", len(body), body))) }
	for {
		body, err := readPMI2(rd)
		if err != nil {
			s.fail("rank %d: read: %v", rank, err)
			return
		}
		if !strings.HasSuffix(body, ";") {
			s.fail("rank %d: unterminated command %q", rank, body)
		}
		kv := parsePMI2(body)
		s.mu.Lock()
		s.seen[kv["cmd"]]++
		s.mu.Unlock()
		switch kv["cmd"] {
		case "fullinit":
			if kv["pmijobid"] != s.jobid || kv["pmirank"] != strconv.Itoa(rank) {
				s.fail("rank %d: fullinit %q", rank, body)
			}
			reply(fmt.Sprintf("cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=%d;size=%d;appnum=0;debugged=FALSE;pmiverbose=FALSE;", rank, s.n))
		case "kvs-put":
			if len(kv["value"]) > pmi2ValMax || len(kv["key"]) > pmi2KeyMax {
				s.fail("rank %d: kvs-put over the limits: key %d, value %d bytes", rank, len(kv["key"]), len(kv["value"]))
			}
			s.mu.Lock()
			s.pending[kv["key"]] = kv["value"]
			s.mu.Unlock()
			reply("cmd=kvs-put-response;rc=0;")
		case "kvs-fence":
			s.mu.Lock()
			gen := s.gen
			if s.arrived++; s.arrived == s.n {
				for k, v := range s.pending {
					s.kvs[k] = v
				}
				s.pending, s.arrived = map[string]string{}, 0
				s.gen++
				s.cond.Broadcast()
			}
			for s.gen == gen && !s.gone {
				s.cond.Wait()
			}
			if s.gen == gen {
				n := s.arrived
				s.mu.Unlock()
				s.fail("rank %d: kvs-fence never completed: %d of %d ranks came to it", rank, n, s.n)
				return
			}
			s.mu.Unlock()
			reply("cmd=kvs-fence-response;rc=0;")
		case "kvs-get":
			s.mu.Lock()
			v, ok := s.kvs[kv["key"]]
			s.mu.Unlock()
			if kv["jobid"] != s.jobid {
				s.fail("rank %d: kvs-get of job %q", rank, kv["jobid"])
			}
			if ok {
				reply("cmd=kvs-get-response;rc=0;found=TRUE;value=" + v + ";")
			} else {
				reply("cmd=kvs-get-response;rc=0;found=FALSE;")
			}
		case "finalize":
			reply("cmd=finalize-response;rc=0;")
			return
		default:
			s.fail("rank %d: unknown command %q", rank, body)
			reply("cmd=" + kv["cmd"] + "-response;rc=-1;errmsg=unknown;")
		}
	}
}

// runPMI2 starts n ranks of role with PMI_FD (a socketpair to the server),
// PMI_JOBID, PMI_RANK and PMI_SIZE, as srun --mpi=pmi2 does, and returns
// each rank's result.
func runPMI2(t *testing.T, srv *pmi2Server, role string, env ...string) map[int]rankResult {
	t.Helper()
	t.Cleanup(srv.abandon) // also when the test ends early
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	outs := make(chan rankOut, srv.n)
	var served sync.WaitGroup
	for r := range srv.n {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		mine, theirs := os.NewFile(uintptr(fds[0]), "pmi-server"), os.NewFile(uintptr(fds[1]), "pmi-client")
		c, err := net.FileConn(mine)
		mine.Close()
		if err != nil {
			t.Fatal(err)
		}
		served.Add(1)
		go func() { defer served.Done(); srv.serve(c, r) }()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.ExtraFiles = []*os.File{theirs} // fd 3 in the child
		cmd.Env = append(cleanEnv(), "BSTEST_ROLE="+role, "BSTEST_METHOD=auto", "BSTEST_TIMEOUT=10s",
			"PMI_FD=3", "PMI_JOBID="+srv.jobid, "PMI_RANK="+strconv.Itoa(r), "PMI_SIZE="+strconv.Itoa(srv.n))
		cmd.Env = append(cmd.Env, env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		theirs.Close()
		go func() {
			err := cmd.Wait()
			if err != nil {
				err = fmt.Errorf("%v: %s", err, stderr.String())
			}
			outs <- rankOut{r, stdout.Bytes(), err}
		}()
	}
	res := collectResults(t, outs, srv.n, nil)
	// Every client has exited: a server goroutine still in a fence waits
	// for a rank that will never come. Wake it, and give the goroutines a
	// deadline instead of the package's timeout.
	srv.abandon()
	done := make(chan struct{})
	go func() { served.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second * testkit.RaceScale):
		t.Fatalf("PMI-2 server: its goroutines still run %v after every rank exited", 10*time.Second*testkit.RaceScale)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if len(srv.errs) > 0 {
		sort.Strings(srv.errs)
		t.Errorf("PMI-2 server: %s", strings.Join(srv.errs, "; "))
	}
	return res
}

// TestPMI2AllGather: the pmi method speaks Slurm's PMI-2 when PMI_JOBID is
// set: fullinit, kvs-put, kvs-fence, kvs-get and finalize against an
// in-test server, with multi-chunk blobs, directly (every rank reads
// every rank) and through rank 0 (BSTEST_PMI_DIRECT=2).
func TestPMI2AllGather(t *testing.T) {
	for _, c := range []struct {
		n      int
		direct string
	}{{4, "16"}, {5, "2"}} {
		t.Run(fmt.Sprintf("n=%d,direct=%s", c.n, c.direct), func(t *testing.T) {
			srv := newPMI2Server(c.n, "77.3")
			res := runPMI2(t, srv, "gather", "BSTEST_PMI_DIRECT="+c.direct)
			wantAllOK(t, res)
			for r, rr := range res {
				if rr.Job != "pmi2-77.3" { // from PMI_JOBID
					t.Errorf("rank %d: job %q, want pmi2-77.3", r, rr.Job)
				}
			}
			for _, cmd := range []string{"fullinit", "kvs-put", "kvs-fence", "kvs-get", "finalize"} {
				if srv.seen[cmd] == 0 {
					t.Errorf("no %s served (%v)", cmd, srv.seen)
				}
			}
			if srv.seen["fullinit"] != c.n || srv.seen["finalize"] != c.n {
				t.Errorf("fullinit %d, finalize %d times for %d ranks", srv.seen["fullinit"], srv.seen["finalize"], c.n)
			}
		})
	}
}

// TestPMI2Mismatch: ranks calling different collectives get fault.ErrMismatch
// naming each other over PMI-2 too.
func TestPMI2Mismatch(t *testing.T) {
	res := runPMI2(t, newPMI2Server(3, "78.0"), "mismatch")
	wantKind(t, res, 0, "collective mismatch", []int{1}, `rank 1 called "shard-sizes" (#1), rank 0 called "fabric-addr" (#1)`)
}
