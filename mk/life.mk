# A job's whole life (issue 31): programs that never close exit 0 under
# mpiexec, srun and ddrun and leave nothing behind, wrappers start, Ctrl-C
# ends like an interrupt (every Python rank interrupted, no rank killed,
# no segment left), SIGTERM (scancel, ddrun) ends Python ranks cleanly. numactl is one of the wrappers tried.

DEPS += numactl:numactl

TEST_EXTRA += test-life
.PHONY: test-life

test-life: deps python-deps
	bash examples/life/life-test.sh
