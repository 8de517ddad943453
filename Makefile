# ddstore: build, test and demo targets. Every target installs what it needs first.
# Each part of the project adds its own targets and packages in mk/*.mk.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)
GO ?= go
BIN := bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Debian packages the build and the tests need, as command:package pairs: the
# package is installed when the command is missing. mk/*.mk files add theirs.
DEPS := fi_info:libfabric-bin mpiexec.mpich:mpich mpirun.openmpi:openmpi-bin tmux:tmux gcc:gcc pkg-config:pkg-config
# Packages checked by pkg-config name (libraries without a command).
DEPS_PC := libfabric:libfabric-dev
# Extra test steps that mk/*.mk files append to make test.
TEST_EXTRA :=
# Fuzz targets (each >= 1M executions) that mk/*.mk files append; make fuzz runs them all.
FUZZ_TARGETS :=

-include mk/*.mk

.PHONY: deps build test test-plain demo bench fuzz clean

deps:
	@missing=""; \
	for d in $(DEPS); do command -v "$${d%%:*}" >/dev/null 2>&1 || missing="$$missing $${d#*:}"; done; \
	for d in $(DEPS_PC); do pkg-config --exists "$${d%%:*}" 2>/dev/null || missing="$$missing $${d#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@command -v $(GO) >/dev/null || { echo "Go 1.26 is required (https://go.dev/dl); put it on PATH" >&2; exit 1; }

build: deps
	$(GO) build -o $(BIN)/ ./cmd/... ./examples/train ./examples/bench

# Parts whose tests skip where they are missing (go test ./... run bare
# on a laptop) but must fail in make test, the CI path: libfabric's
# providers, MPICH's mpiexec.mpich and Open MPI's mpirun.openmpi (with
# mpi4py), root's mounts and namespaces, Chromium and Prometheus. Exported
# to every step of make test (TEST_EXTRA included). Slurm's and torch's
# tests never skip: a missing srun or torch fails them.
REQUIRE := DDSTORE_REQUIRE_FABRIC DDSTORE_REQUIRE_MPI DDSTORE_REQUIRE_ROOT DDTOP_REQUIRE_BROWSER DDTOP_REQUIRE_PROMETHEUS
$(foreach v,$(REQUIRE),$(eval test: export $(v) := 1))

# The README's test command.
# Every test runs once, under the race detector (test-race-all, mk/race.mk),
# except those that measure: they run here, without it. make test-plain runs
# the whole suite without the detector.
test: deps $(TEST_EXTRA)
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 20m -run '^($(PLAIN_ONLY))$$' ./examples/train ./engine/ctrl

test-plain: deps
	$(GO) test -count=1 -timeout 20m ./...

# The README's main job: a 4-rank trainer on the embedded default config, with ddtop attached.
demo: build
	bash examples/demo.sh

bench: build
	$(BIN)/ddrun -n 2 $(BIN)/bench

fuzz: deps $(FUZZ_TARGETS)

clean:
	rm -rf $(BIN)
