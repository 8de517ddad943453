# The doctor (engine/doctor, cmd/doctor).
#   test-doctor-job: doctor --job on 4 network-namespace hosts, one of them
#     rate-limited with tc tbf; every run must name that host and nothing
#     else within 60 s (DOCTOR_JOB_RUNS runs; the issue's goal is 5 of 5).
#   doctor-compare: the doctor's read figures against fabric's BenchmarkRead,
#     paired and alternating (DOCTOR_COMPARE_ROUNDS rounds).
#   doctor-compare-bins: bin/doctor and bin/fabric.test, for running
#     compare.sh on a machine without Go (BIN=bin bash examples/doctor/compare.sh).

.PHONY: test-doctor-job doctor-compare doctor-compare-bins

TEST_EXTRA += test-doctor-job
DOCTOR_JOB_RUNS ?= 2
DOCTOR_COMPARE_ROUNDS ?= 5

test-doctor-job: deps
	flock /tmp/ddstore-singleton.lock env RUNS=$(DOCTOR_JOB_RUNS) GO=$(GO) bash examples/netns/doctor-job.sh

doctor-compare: doctor-compare-bins
	flock /tmp/ddstore-bench.lock env ROUNDS=$(DOCTOR_COMPARE_ROUNDS) BIN=$(BIN) bash examples/doctor/compare.sh

doctor-compare-bins: deps
	$(GO) build -o $(BIN)/ ./cmd/doctor
	$(GO) test -c -o $(BIN)/fabric.test ./fabric
