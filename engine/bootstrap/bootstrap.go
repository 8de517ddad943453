package bootstrap

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/fault"
)

// Exchanger runs small collectives among all ranks of a job. Every rank must
// call the same collectives with the same tags in the same order. An
// Exchanger is not safe for concurrent use. After a failed collective the
// Exchanger is broken: later calls return an fault.ErrClosed error that wraps the
// first failure.
type Exchanger interface {
	Rank() int
	Size() int
	// AllGather returns every rank's blob in rank order (result[Rank()] is a
	// copy of mine). timeout ≤ 0 means Options.Timeout.
	AllGather(tag string, mine []byte, timeout time.Duration) ([][]byte, error)
	// Barrier returns once every rank has entered it.
	Barrier(tag string, timeout time.Duration) error
	Close() error
}

// JobNamer is implemented by exchangers that learn the job id from the
// launcher (the PMI exchanger reports its KVS name).
type JobNamer interface{ Job() string }

// MethodOf is the bootstrap method x uses ("pmi", "pmi2", "tcp", "dir",
// "single"), "" for an exchanger of another package.
func MethodOf(x Exchanger) string {
	if m, ok := x.(interface{ Method() string }); ok {
		return m.Method()
	}
	return ""
}

// JobOf returns the job id every rank shares: envJob (Env.Job) when the
// environment names one, else the one x learned from the launcher, else "".
func JobOf(x Exchanger, envJob string) string {
	if envJob != "" {
		return envJob
	}
	if j, ok := x.(JobNamer); ok {
		return j.Job()
	}
	return ""
}

// Options configures Connect. The zero value is valid: auto method, the
// launcher's environment, 60s timeout.
type Options struct {
	// Method: "auto" (default when ""), "pmi", "tcp", "dir" or "single".
	// auto: pmi if PMI_FD is set (PMI-1 under MPICH's mpiexec, PMI-2 when
	// PMI_JOBID is set too, as under srun --mpi=pmi2); else tcp if Addr, DDSTORE_BOOTSTRAP_ADDR or
	// MASTER_ADDR/MASTER_PORT is set, or under srun (SlurmRendezvous); else dir if Dir or
	// DDSTORE_BOOTSTRAP_DIR is set; else single when the world has one rank;
	// else, under Open MPI's mpirun with every rank on one node, dir in
	// that node's session directory (OpenMPIDir); else an error saying
	// what to set.
	Method string
	// Addr is the tcp rendezvous "host:port" where rank 0 listens and the
	// others connect. Default DDSTORE_BOOTSTRAP_ADDR, else MASTER_ADDR:MASTER_PORT,
	// else, for the tasks of a Slurm step (and no Dir), SlurmRendezvous: the
	// step's first node and a port derived from the job and step ids
	// (under torchrun MASTER_PORT is taken by torch's own store on the
	// master node: set DDSTORE_BOOTSTRAP_ADDR there).
	Addr string
	// Dir is the shared directory of the dir method. Default DDSTORE_BOOTSTRAP_DIR.
	Dir string
	// Token must be equal on all ranks; peers with another token are refused.
	// Default DDSTORE_JOB_TOKEN, else the job id (under MPICH's mpiexec,
	// which exports none, the PMI KVS name).
	Token string
	// Secret is the job's secret (at least 16 bytes) that every control
	// connection proves it knows (engine/auth); it never crosses the wire.
	// Default DDSTORE_TOKEN, else under pmi and dir a random one rank 0
	// publishes, else for tcp the token file (TokenFile). See secret.go.
	Secret []byte
	// TokenFile is the tcp method's token file. Default DDSTORE_TOKEN_FILE,
	// else ~/.ddstore/token (created 0600 on first use).
	TokenFile string
	// Insecure runs the job without a secret (also DDSTORE_INSECURE=1): any
	// process that reaches its ports may join. A warning is logged.
	Insecure bool
	// Timeout bounds Connect and is the default of every collective. Default 60s.
	Timeout time.Duration
	// Env is the launcher's view of this process. Zero (World == 0) means
	// DetectEnv().
	Env Env
}

// DefaultTimeout is Options.Timeout when zero.
const DefaultTimeout = 60 * time.Second

// Validate checks the fields that do not depend on the environment.
func (o Options) Validate() error {
	switch o.Method {
	case "", "auto", "pmi", "tcp", "dir", "single":
	default:
		return optErr("Method %q: want auto, pmi, tcp, dir or single", o.Method)
	}
	if o.Timeout < 0 {
		return optErr("Timeout %v is negative", o.Timeout)
	}
	if o.Env.World != 0 {
		if err := o.Env.Validate(); err != nil {
			return err
		}
	}
	if strings.ContainsAny(o.Token, "\n\x00") {
		return optErr("Token contains a newline or NUL")
	}
	return nil
}

func optErr(format string, args ...any) error {
	return &fault.Error{Op: "options", Kind: fault.ErrEnv, Side: fault.Local, Detail: fmt.Sprintf(format, args...)}
}

// resolved is Options with every default filled in.
type resolved struct {
	Options
	method    string
	secret    []byte // nil: none yet (pmi, dir: rank 0 makes one) or insecure
	secretSrc string
}

func (o Options) resolve() (resolved, error) {
	if err := o.Validate(); err != nil {
		return resolved{}, err
	}
	if o.Env.World == 0 {
		e, err := DetectEnv()
		if err != nil {
			return resolved{}, err
		}
		o.Env = e
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	launch, err := configs.ReadLaunch()
	if err != nil {
		return resolved{}, optErr("%v", err)
	}
	if o.Token == "" {
		o.Token = launch.JobToken
	}
	if o.Token == "" {
		o.Token = o.Env.Job
	}
	if o.Dir == "" {
		o.Dir = launch.BootstrapDir
	}
	addrErr := error(nil)
	if o.Addr == "" {
		o.Addr = launch.BootstrapAddr
	}
	if o.Addr == "" {
		host, port := os.Getenv("MASTER_ADDR"), os.Getenv("MASTER_PORT")
		switch {
		case host != "" && port != "":
			o.Addr = joinHostPort(host, port)
		case host != "":
			addrErr = optErr("MASTER_ADDR=%q is set but MASTER_PORT is not", host)
		case port != "":
			addrErr = optErr("MASTER_PORT=%q is set but MASTER_ADDR is not", port)
		}
	}
	if o.Addr == "" && addrErr == nil && o.Dir == "" && (o.Method == "" || o.Method == "auto" || o.Method == "tcp") &&
		inSlurmStep(lookupEnv, o.Env) {
		// Under srun with no address given: every task derives the same
		// rendezvous from the step's node list and ids.
		addr, ok, err := slurmRendezvous(lookupEnv)
		switch {
		case err != nil:
			addrErr = err
		case ok:
			o.Addr = addr
		}
	}
	m := o.Method
	if m == "" || m == "auto" {
		// PMI_FD: MPICH Hydra's PMI-1, or with PMI_JOBID Slurm's PMI-2.
		_, hasPMI := os.LookupEnv("PMI_FD")
		switch {
		case hasPMI:
			m = "pmi"
		case o.Addr != "" || addrErr != nil:
			m = "tcp"
		case o.Dir != "":
			m = "dir"
		case o.Env.Launcher == "openmpi" && o.Env.World > 1:
			// Open MPI's mpirun has no PMI-1 server: one node's ranks
			// meet in a directory of that node.
			dir, err := OpenMPIDir(lookupEnv, o.Env)
			if err != nil {
				return resolved{}, err
			}
			o.Dir, m = dir, "dir"
		case o.Env.World == 1:
			m = "single"
		default:
			return resolved{}, optErr("%d ranks (%s) but no way to exchange: set MASTER_ADDR and MASTER_PORT "+
				"(or DDSTORE_BOOTSTRAP_ADDR, Options.Addr) for tcp, DDSTORE_BOOTSTRAP_DIR (or Options.Dir) to a shared directory, "+
				"or launch with MPICH mpiexec (PMI_FD) or srun (SLURM_STEP_NODELIST, SLURM_JOB_ID)", o.Env.World, o.Env.Launcher)
		}
	}
	switch m {
	case "tcp":
		if addrErr != nil {
			return resolved{}, addrErr
		}
		if o.Addr == "" {
			return resolved{}, optErr("tcp method needs Options.Addr or MASTER_ADDR and MASTER_PORT")
		}
	case "dir":
		if o.Dir == "" {
			return resolved{}, optErr("dir method needs Options.Dir or DDSTORE_BOOTSTRAP_DIR")
		}
	case "pmi":
		if _, ok := os.LookupEnv("PMI_FD"); !ok {
			return resolved{}, optErr("pmi method needs PMI_FD (start the job with MPICH's mpiexec)")
		}
	case "single":
		if o.Env.World != 1 {
			return resolved{}, optErr("single method with a world of %d ranks", o.Env.World)
		}
	}
	r := resolved{Options: o, method: m}
	if err := r.resolveSecret(launch.Insecure, launch.Token, launch.TokenFile); err != nil {
		return resolved{}, err
	}
	return r, nil
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// Connect joins the job's exchange. It returns once every rank has joined
// (tcp, dir, pmi all end with a collective that checks tokens and world
// size), or an error naming the ranks that did not arrive within
// Options.Timeout.
func Connect(o Options) (Exchanger, error) {
	r, err := o.resolve()
	if err != nil {
		return nil, err
	}
	if r.Env.World == 1 && (r.method == "tcp" || r.method == "dir") {
		r.method = "single"
	}
	if r.method == "single" {
		return &single{}, nil
	}
	release, err := hold(r)
	if err != nil {
		return nil, err
	}
	var x interface {
		Exchanger
		setRelease(func())
	}
	switch r.method {
	case "tcp":
		x, err = connectTCP(r)
	case "dir":
		x, err = connectDir(r)
	default:
		x, err = connectPMI(r)
	}
	if err != nil {
		release()
		return nil, err
	}
	x.setRelease(release)
	return x, nil
}

// single is the exchanger of a one-rank job.
type single struct{ closed bool }

// Single is the exchanger of a one-rank job: every collective returns at once.
func Single() Exchanger { return &single{} }

func (s *single) Rank() int { return 0 }
func (s *single) Size() int { return 1 }
func (s *single) AllGather(tag string, mine []byte, _ time.Duration) ([][]byte, error) {
	if s.closed {
		return nil, &fault.Error{Op: opName("single", fmt.Sprintf("allgather %q", tag)), Kind: fault.ErrClosed, Side: fault.Local}
	}
	if len(mine) > MaxMessage {
		return nil, &fault.Error{Op: opName("single", fmt.Sprintf("allgather %q", tag)), Kind: fault.ErrTooLarge, Side: fault.Local,
			Detail: fmt.Sprintf("blob of %d bytes exceeds %d", len(mine), MaxMessage)}
	}
	return [][]byte{append([]byte(nil), mine...)}, nil
}
func (s *single) Barrier(tag string, t time.Duration) error {
	_, err := s.AllGather(tag, nil, t)
	return err
}
func (s *single) Close() error   { s.closed = true; return nil }
func (s *single) Method() string { return "single" }
