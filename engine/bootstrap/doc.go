// Package bootstrap owns how the ranks of one ddstore job find each other:
// which launcher started the process (DetectEnv: Slurm srun, MPICH Hydra
// mpiexec, Open MPI mpirun, torchrun-style RANK/WORLD_SIZE, or none), and a
// small collective exchanger (Connect) that gathers one blob from every rank
// in rank order. The engine uses it to exchange fabric addresses, memory keys
// and shard sizes once per variable; it is not on any hot path.
//
// Three exchange methods exist, chosen by Options.Method:
//
//   - "pmi": the launcher's key-value store over PMI_FD: PMI-1 (MPICH
//     Hydra), or Slurm's PMI-2 wire protocol when PMI_JOBID is set too
//     (srun --mpi=pmi2).
//     PMI-1 cannot tell who is missing from a barrier, so a PMI timeout
//     names no ranks.
//   - "tcp": a rendezvous at rank 0 (Options.Addr, DDSTORE_BOOTSTRAP_ADDR or
//     MASTER_ADDR:MASTER_PORT); rank 0 is a hub, every collective is one
//     round trip through it, and rank 0 tells the others who is missing.
//   - "dir": files in a directory every rank can see (Options.Dir or
//     DDSTORE_BOOTSTRAP_DIR), for example on $SCRATCH. The job id names the
//     job's subdirectory, so it must be unique per run (Slurm's and ddrun's
//     are; a crashed run's leftovers are refused only if its token differs).
//
// Under srun with no address given, every task derives the same tcp
// rendezvous (SlurmRendezvous: the first host of the step's node list, in
// Slurm's hostlist syntax expanded by ExpandHostlist, and a port computed
// from the job and step ids); MASTER_ADDR/MASTER_PORT override it.
//
// "auto" picks pmi when PMI_FD is set, else tcp when an address is known,
// else dir when a directory is known, else, under Open MPI's mpirun (which
// serves PMIx, not PMI-1) with every rank on this node, dir in the node's
// PMIx session directory (OpenMPIDir; over several nodes an error says what
// to set), else the trivial exchanger of a single rank job. Every wait has a deadline; a timeout names the ranks that never
// arrived (errors.Is(err, fault.ErrTimeout), RanksOf(err)); a job token
// (Options.Token or DDSTORE_JOB_TOKEN) keeps two jobs that
// share an address or a directory apart; the job's secret (secret.go:
// rank 0's random one through PMI or the 0700 directory, DDSTORE_TOKEN, or
// the 0600 token file ~/.ddstore/token) is what every connection to the
// tcp rendezvous proves first (engine/auth), and SecretOf hands it to the
// store's mesh; every collective carries a sequence
// number and its tag, so ranks that call collectives in a different order get
// fault.ErrMismatch instead of each other's data.
package bootstrap
