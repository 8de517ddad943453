package bootstrap

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ddstore/ddstore/configs"
	"github.com/ddstore/ddstore/fault"
)

// Env is what the launcher says about this process.
type Env struct {
	Rank       int    // global rank, 0 ≤ Rank < World
	World      int    // number of ranks; 0 in Options.Env means "call DetectEnv"
	LocalRank  int    // rank among the ranks on this node
	LocalWorld int    // ranks on this node; 0 when the launcher does not say
	Launcher   string // "slurm", "hydra", "openmpi", "torchrun", "none"
	// Job is the job id every rank shares: DDSTORE_JOB, else the
	// launcher's (Slurm's job and step, torchrun's run id or rendezvous,
	// Open MPI's namespace); "" when the launcher exports none (MPICH's
	// mpiexec: the exchanger names the job then, see JobOf). Never the
	// parent's pid, which a wrapper (sh -c, numactl, nsys) changes per rank.
	Job string
}

// String is a one-line summary for logs.
func (e Env) String() string {
	return fmt.Sprintf("rank %d/%d local %d/%d launcher %s job %s",
		e.Rank, e.World, e.LocalRank, e.LocalWorld, e.Launcher, e.Job)
}

// Validate checks the ranges of the fields.
func (e Env) Validate() error {
	switch {
	case e.World < 1:
		return envErr("world size %d < 1", e.World)
	case e.Rank < 0 || e.Rank >= e.World:
		return envErr("rank %d outside [0, %d)", e.Rank, e.World)
	case e.LocalWorld < 0 || e.LocalWorld > e.World:
		return envErr("local world size %d outside [0, %d]", e.LocalWorld, e.World)
	case e.LocalRank < 0 || (e.LocalWorld > 0 && e.LocalRank >= e.LocalWorld):
		return envErr("local rank %d outside [0, %d)", e.LocalRank, e.LocalWorld)
	}
	return nil
}

func envErr(format string, args ...any) error {
	return &fault.Error{Op: "env", Kind: fault.ErrEnv, Side: fault.Local, Detail: fmt.Sprintf(format, args...)}
}

// DetectEnv reads the launcher's environment variables. The innermost
// launcher wins, so that a launcher started inside a Slurm allocation is not
// mistaken for the allocation: torchrun-style RANK/WORLD_SIZE (also set by
// ddrun), then Open MPI (OMPI_COMM_WORLD_*), then MPICH Hydra (PMI_RANK,
// PMI_SIZE), then Slurm (SLURM_PROCID, SLURM_NTASKS). Without any of them the
// process is rank 0 of 1. DDSTORE_JOB, when set, replaces the job id. A
// variable that is present but malformed or inconsistent is an fault.ErrEnv error
// that names it.
func DetectEnv() (Env, error) { return detectEnv(os.LookupEnv) }

type lookupFunc func(string) (string, bool)

var lookupEnv lookupFunc = os.LookupEnv

func detectEnv(look lookupFunc) (Env, error) {
	var (
		e   Env
		err error
	)
	has := func(k string) bool { _, ok := look(k); return ok }
	switch {
	case has("RANK") || has("WORLD_SIZE"):
		e, err = detectTorch(look)
	case has("OMPI_COMM_WORLD_RANK") || has("OMPI_COMM_WORLD_SIZE"):
		e, err = detectOMPI(look)
	case has("PMI_RANK") || has("PMI_SIZE"):
		e, err = detectHydra(look)
	case has("SLURM_PROCID") || has("SLURM_NTASKS"):
		e, err = detectSlurm(look)
	default:
		e = Env{Rank: 0, World: 1, LocalRank: 0, LocalWorld: 1, Launcher: "none",
			Job: fmt.Sprintf("local-%d", os.Getpid())}
	}
	if err != nil {
		return Env{}, err
	}
	if j, ok := configs.LookupJob(look); ok {
		j = strings.TrimSpace(j)
		if j == "" || j == "." || j == ".." || strings.ContainsAny(j, "/\\ \t\n") {
			return Env{}, envErr("%s=%q: want a non-empty id without '/', '\\' or spaces", configs.EnvJob, j)
		}
		e.Job = j
	}
	if err := e.Validate(); err != nil {
		return Env{}, err
	}
	return e, nil
}

// envInt parses a required (or optional) integer variable.
func envInt(look lookupFunc, name string, required bool, min int) (int, bool, error) {
	v, ok := look(name)
	if !ok {
		if required {
			return 0, false, envErr("%s is not set", name)
		}
		return 0, false, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, false, envErr("%s=%q is not an integer", name, v)
	}
	if n < min {
		return 0, false, envErr("%s=%d must be ≥ %d", name, n, min)
	}
	return n, true, nil
}

// rankWorld reads a rank/world pair and checks rank < world, naming both.
func rankWorld(look lookupFunc, rankVar, worldVar string) (int, int, error) {
	r, _, err := envInt(look, rankVar, true, 0)
	if err != nil {
		return 0, 0, err
	}
	w, _, err := envInt(look, worldVar, true, 1)
	if err != nil {
		return 0, 0, err
	}
	if r >= w {
		return 0, 0, envErr("%s=%d is not below %s=%d", rankVar, r, worldVar, w)
	}
	return r, w, nil
}

// localPair reads optional local rank/size variables and checks them.
func localPair(look lookupFunc, e *Env, rankVar, sizeVar string) error {
	lr, hasLR, err := envInt(look, rankVar, false, 0)
	if err != nil {
		return err
	}
	lw, hasLW, err := envInt(look, sizeVar, false, 1)
	if err != nil {
		return err
	}
	if hasLW {
		if lw > e.World {
			return envErr("%s=%d exceeds the world size %d", sizeVar, lw, e.World)
		}
		e.LocalWorld = lw
	}
	if hasLR {
		if hasLW && lr >= lw {
			return envErr("%s=%d is not below %s=%d", rankVar, lr, sizeVar, lw)
		}
		if lr >= e.World {
			return envErr("%s=%d is not below the world size %d", rankVar, lr, e.World)
		}
		e.LocalRank = lr
	}
	return nil
}

// launcherEnv is the Env of a launcher that names rank and world size in
// the variables rankVar and worldVar and the local ones in localRankVar and
// localSizeVar.
func launcherEnv(look lookupFunc, launcher, rankVar, worldVar, localRankVar, localSizeVar string) (Env, error) {
	r, w, err := rankWorld(look, rankVar, worldVar)
	if err != nil {
		return Env{}, err
	}
	e := Env{Rank: r, World: w, Launcher: launcher}
	if err := localPair(look, &e, localRankVar, localSizeVar); err != nil {
		return Env{}, err
	}
	return e, nil
}

func detectTorch(look lookupFunc) (Env, error) {
	e, err := launcherEnv(look, "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
	if err != nil {
		return Env{}, err
	}
	switch {
	case nonEmpty(look, "TORCHELASTIC_RUN_ID") != "":
		e.Job = "torch-" + nonEmpty(look, "TORCHELASTIC_RUN_ID")
	case nonEmpty(look, "MASTER_ADDR") != "" && nonEmpty(look, "MASTER_PORT") != "":
		e.Job = "torch-" + nonEmpty(look, "MASTER_ADDR") + "-" + nonEmpty(look, "MASTER_PORT")
	case inSlurmStep(look, e) && slurmJob(look) != "":
		// A wrapper under srun that exports RANK/WORLD_SIZE from the
		// step's SLURM_PROCID/SLURM_NTASKS: the step is the job.
		e.Job = "slurm-" + slurmJob(look)
	}
	return e, nil
}

func detectOMPI(look lookupFunc) (Env, error) {
	e, err := launcherEnv(look, "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
	if err != nil {
		return Env{}, err
	}
	switch {
	case nonEmpty(look, "PMIX_NAMESPACE") != "":
		e.Job = "ompi-" + nonEmpty(look, "PMIX_NAMESPACE")
	case nonEmpty(look, "OMPI_MCA_ess_base_jobid") != "":
		e.Job = "ompi-" + nonEmpty(look, "OMPI_MCA_ess_base_jobid")
	}
	return e, nil
}

// OpenMPIDir is the exchange directory that "auto" uses for a job of e
// under Open MPI's mpirun when nothing else is given: the node's PMIx
// session directory (PMIX_SERVER_TMPDIR, which mpirun removes when the
// job ends), else os.TempDir(). A directory of one node serves only a job
// whose ranks all run there (OMPI_COMM_WORLD_LOCAL_SIZE equal to
// OMPI_COMM_WORLD_SIZE, and OMPI_MCA_orte_num_nodes at most 1 where set);
// any other job gets an fault.ErrEnv error saying what to set instead.
func OpenMPIDir(look func(string) (string, bool), e Env) (string, error) {
	if e.Launcher != "openmpi" {
		return "", envErr("launcher %q is not Open MPI", e.Launcher)
	}
	nodes, hasNodes, err := envInt(look, "OMPI_MCA_orte_num_nodes", false, 1)
	if err != nil {
		return "", err
	}
	if e.LocalWorld != e.World || (hasNodes && nodes > 1) {
		span := fmt.Sprintf("OMPI_COMM_WORLD_LOCAL_SIZE=%d of OMPI_COMM_WORLD_SIZE=%d", e.LocalWorld, e.World)
		if hasNodes {
			span += fmt.Sprintf(", OMPI_MCA_orte_num_nodes=%d", nodes)
		}
		return "", envErr("Open MPI job over more than one node (%s) and no way to exchange: "+
			"pass an mpi4py communicator (DDStore(comm=MPI.COMM_WORLD)), or set MASTER_ADDR and MASTER_PORT "+
			"(or DDSTORE_BOOTSTRAP_ADDR) for tcp, or DDSTORE_BOOTSTRAP_DIR to a directory every node sees", span)
	}
	if d := nonEmpty(look, "PMIX_SERVER_TMPDIR"); d != "" {
		return d, nil
	}
	return os.TempDir(), nil
}

// detectHydra: MPICH's Hydra mpiexec. It exports no job id that every
// rank shares: the job stays unnamed (""), and the PMI exchanger names it
// from the KVS name (see JobOf). Set DDSTORE_JOB to use the dir method
// under mpiexec.
func detectHydra(look lookupFunc) (Env, error) {
	e, err := launcherEnv(look, "hydra", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
	if err != nil {
		return Env{}, err
	}
	if fd, ok := look("PMI_FD"); ok {
		if _, err := strconv.Atoi(strings.TrimSpace(fd)); err != nil {
			return Env{}, envErr("PMI_FD=%q is not a file descriptor number", fd)
		}
	}
	if j := nonEmpty(look, "PMI_JOBID"); j != "" {
		// Slurm's PMI-2 (srun --mpi=pmi2) sets PMI_RANK/PMI_SIZE too.
		e.Launcher, e.Job = "slurm", "slurm-"+slurmJob(look)
		if slurmJob(look) == "" {
			e.Job = "pmi2-" + j
		}
	}
	return e, nil
}

func detectSlurm(look lookupFunc) (Env, error) {
	r, w, err := rankWorld(look, "SLURM_PROCID", "SLURM_NTASKS")
	if err != nil {
		return Env{}, err
	}
	e := Env{Rank: r, World: w, Launcher: "slurm"}
	lr, _, err := envInt(look, "SLURM_LOCALID", false, 0)
	if err != nil {
		return Env{}, err
	}
	if lr >= w {
		return Env{}, envErr("SLURM_LOCALID=%d is not below SLURM_NTASKS=%d", lr, w)
	}
	e.LocalRank = lr
	// Tasks on this node: SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE)
	// is a compressed list like "2(x3),1", indexed by SLURM_NODEID;
	// SLURM_NTASKS_PER_NODE is a single number when --ntasks-per-node was given.
	node, hasNode, err := envInt(look, "SLURM_NODEID", false, 0)
	if err != nil {
		return Env{}, err
	}
	for _, name := range []string{"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"} {
		v, ok := look(name)
		if !ok || e.LocalWorld > 0 {
			continue
		}
		counts, err := parseTasksPerNode(v)
		if err != nil {
			return Env{}, envErr("%s=%q: %v", name, v, err)
		}
		switch {
		case len(counts) == 1:
			e.LocalWorld = counts[0]
		case hasNode && node < len(counts):
			e.LocalWorld = counts[node]
		case hasNode:
			return Env{}, envErr("SLURM_NODEID=%d but %s=%q lists %d nodes", node, name, v, len(counts))
		}
	}
	if e.LocalWorld == 0 {
		n, ok, err := envInt(look, "SLURM_NTASKS_PER_NODE", false, 1)
		if err != nil {
			return Env{}, err
		}
		if ok {
			e.LocalWorld = n
		}
	}
	if e.LocalWorld > e.World {
		return Env{}, envErr("tasks per node %d exceeds SLURM_NTASKS=%d", e.LocalWorld, e.World)
	}
	if e.LocalWorld > 0 && e.LocalRank >= e.LocalWorld {
		return Env{}, envErr("SLURM_LOCALID=%d is not below the %d tasks on this node", e.LocalRank, e.LocalWorld)
	}
	if job := slurmJob(look); job != "" {
		e.Job = "slurm-" + job
	}
	return e, nil
}

// slurmJob is "<job>.<step>" (or "<job>") from Slurm's variables, "" when
// no job id is set.
func slurmJob(look lookupFunc) string {
	job := nonEmpty(look, "SLURM_JOB_ID")
	if job == "" {
		job = nonEmpty(look, "SLURM_JOBID")
	}
	if job == "" {
		return ""
	}
	if step := nonEmpty(look, "SLURM_STEP_ID"); step != "" {
		job += "." + step
	} else if step := nonEmpty(look, "SLURM_STEPID"); step != "" {
		job += "." + step
	}
	return job
}

// parseTasksPerNode expands Slurm's "2(x3),1" into [2 2 2 1].
func parseTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(strings.TrimSpace(s), ",") {
		count, rep := part, "1"
		if i := strings.Index(part, "(x"); i >= 0 {
			if !strings.HasSuffix(part, ")") {
				return nil, fmt.Errorf("bad element %q", part)
			}
			count, rep = part[:i], part[i+2:len(part)-1]
		}
		c, err := strconv.Atoi(count)
		if err != nil || c < 1 {
			return nil, fmt.Errorf("bad task count %q", part)
		}
		r, err := strconv.Atoi(rep)
		if err != nil || r < 1 || r > 1<<20 {
			return nil, fmt.Errorf("bad repeat %q", part)
		}
		for range r {
			out = append(out, c)
		}
	}
	return out, nil
}

func nonEmpty(look lookupFunc, name string) string {
	v, _ := look(name)
	return strings.TrimSpace(v)
}
