# The scalable control plane (engine/ctrl, issue 27): the scale simulation.
# make test runs its 1 024-rank case (TestScale1024, in one process).

.PHONY: ctrl-scale

CTRL_WORLDS ?= 256,1024,4096,10000
CTRL_PPN ?= 8
CTRL_OUT ?= $(CURDIR)/docs/ctrl-scale.json

# N ranks of the real control plane over loopback sockets, spread over
# worker processes of 2 000 ranks (one process may hold 20 000 descriptors
# here); prints one table row per (N, ranks per node), writes CTRL_OUT and
# the SVG beside it. The 800 KB all-reduce runs up to 256 ranks, the 80 KB one up to 1 024 (every
# simulated rank holds 1.6 MB during it). Under the bench lock.
ctrl-scale: deps
	flock /tmp/ddstore-bench.lock $(GO) test -count=1 -timeout 60m -run '^TestScaleRun$$' ./engine/ctrl \
	  -args -ctrl.worlds=$(CTRL_WORLDS) -ctrl.ppn=$(CTRL_PPN) -ctrl.out=$(CTRL_OUT)

.PHONY: ctrl-allreduce-bench

# Issue 27's all-reduce goal at 4 ranks (800 KB, tree ÷ plain TCP ring and
# ÷ mesh, alternating in every iteration; 1 node of 4 and 4 nodes of 1),
# then the tree's ring-order all-reduce alone with its allocations per
# call. Under the bench lock; the load average before and after.
ctrl-allreduce-bench: deps
	$(GO) test -c -o /tmp/ddstore-mesh.test ./engine/mesh
	$(GO) test -c -o /tmp/ddstore-ctrl.test ./engine/ctrl
	cd engine/mesh && flock /tmp/ddstore-bench.lock sh -c 'uptime; /tmp/ddstore-mesh.test -test.run "^$$" \
	  -test.bench TreeVsTCPRing -test.benchtime 20x -test.count 5; uptime'
	cd engine/ctrl && flock /tmp/ddstore-bench.lock /tmp/ddstore-ctrl.test -test.run '^$$' \
	  -test.bench AllReduceRingOrder -test.benchtime 20x -test.count 3

# Only the no-close runs of make test-life (no Slurm), under CONTROL (tree
# by default): Go and Python programs that never close their store, RUNS
# times each under mpiexec and ddrun, must all exit 0 (issue 27: under
# tree a rank that exits after its last collective is no failure of the
# others). Machine-wide: it takes the singleton lock.
.PHONY: life-noclose
CONTROL ?= tree
RUNS ?= 20
life-noclose: deps python-deps
	env CONTROL=$(CONTROL) RUNS=$(RUNS) flock /tmp/ddstore-singleton.lock bash examples/life/noclose-runs.sh
