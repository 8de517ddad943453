# Multi-node bootstrap (issue 9): a real one-machine Slurm for the launcher
# test, and the launcher comparison.

DEPS += slurmctld:slurm-wlm slurmd:slurm-wlm srun:slurm-wlm munged:munge ip:iproute2 unshare:util-linux

TEST_EXTRA += test-slurm

.PHONY: test-slurm launchers

# examples/train as 4 ranks under srun (derived tcp rendezvous), srun
# --mpi=pmi2 (Slurm's PMI-2) and ddrun on a one-machine Slurm started here
# (munged, slurmctld, slurmd; no systemd, no cgroups): same loss, bit for bit;
# then 16 ranks under srun: control connections per rank checked, a killed
# rank found by every other.
test-slurm: deps
	bash examples/slurm/local-test.sh

# Open of 16 ranks and the 4-rank trainer's epoch time under ddrun, mpiexec
# and (with SLURM_CONF of a running Slurm) srun, side by side.
launchers: deps
	bash examples/launchers.sh

TEST_EXTRA += test-netns
.PHONY: test-netns test-netns-tree test-netns-mesh

# Two "hosts" as network namespaces (own hostname and address, a bridge
# between them): same loss as one host over the veth link (not lo), a cut
# link found within the liveness deadline + 1 s naming the rank, and
# FABRIC_IFACE=lo refused at Open. Skips (exit 0, with the reason) without
# root or the ip tool; fails instead under DDSTORE_REQUIRE_ROOT=1, as in make test).
# make test runs steps 1-5 under tree, the default control plane, then
# step 2 again at the store's default liveness (a cut host known within 6 s).
# test-netns-tree runs every step under tree (6: 16 ranks on each of 3
# hosts, connection counts, a dead host: minutes more, so outside make
# test); test-netns-mesh runs every step, 6 included, under the mesh.
test-netns: deps
	env CONTROL=tree STEPS="1 2 3 4 5" bash examples/netns/netns-test.sh
	env CONTROL=tree LIVENESS=default STEPS=2 bash examples/netns/netns-test.sh

test-netns-tree: deps
	env CONTROL=tree bash examples/netns/netns-test.sh

test-netns-mesh: deps
	env CONTROL=mesh bash examples/netns/netns-test.sh

# The bootstrap's wire decoders fuzzed against round trips and a model
# (engine/bootstrap/fuzz_test.go), FUZZ_BOOT_EXECS executions each:
# FuzzRendezvousFrames (the tcp method's frames) and FuzzPMIGather (PMI-1
# and PMI-2 replies with bytes flipped, through the handshake and an
# AllGather). Interesting inputs are kept in engine/bootstrap/testdata/fuzz.
.PHONY: fuzz-bootstrap
FUZZ_TARGETS += fuzz-bootstrap
FUZZ_BOOT_EXECS ?= 1000000x
fuzz-bootstrap: deps
	$(call fuzz_run,engine/bootstrap,FuzzRendezvousFrames,$(FUZZ_BOOT_EXECS))
	$(call fuzz_run,engine/bootstrap,FuzzPMIGather,$(FUZZ_BOOT_EXECS))
