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
