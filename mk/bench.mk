# Benchmarks: make bench-all reruns every figure of docs/BENCHMARKS.md that this
# machine can measure and writes docs/bench-runs/<UTC time>-<host>.md (machine,
# commit, load average, each figure). 11 min on 2 vCPUs (646 s at load 3-10); BENCH_ONLY picks
# steps (examples/bench/all.sh lists them). On a shared machine:
#   flock /tmp/ddstore-bench.lock make bench-all
.PHONY: bench-all
bench-all: deps
	bash examples/bench/all.sh
