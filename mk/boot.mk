# Multi-node bootstrap (issue 9): a real one-machine Slurm for the launcher
# test, and the launcher comparison.

DEPS += slurmctld:slurm-wlm slurmd:slurm-wlm srun:slurm-wlm munged:munge

TEST_EXTRA += test-slurm

.PHONY: test-slurm launchers

# examples/train as 4 ranks under srun (derived tcp rendezvous), srun
# --mpi=pmi2 (Slurm's PMI-2) and ddrun on a one-machine Slurm started here
# (munged, slurmctld, slurmd; no systemd, no cgroups): same loss, bit for bit.
test-slurm: deps
	bash examples/slurm/local-test.sh

# Open of 16 ranks and the 4-rank trainer's epoch time under ddrun, mpiexec
# and (with SLURM_CONF of a running Slurm) srun, side by side.
launchers: deps
	bash examples/launchers.sh
