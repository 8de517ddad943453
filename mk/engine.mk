# The engine's sturdiness targets: the suite under load (test-stress), the
# soak over every read path and through a replica owner's death (soak; its
# short form test-soak is part of make test), and the telemetry reader's
# fuzz target (fuzz-telemetry, one of make fuzz).

.PHONY: test-stress soak test-soak fuzz-telemetry

DEPS += stress-ng:stress-ng
FUZZ_TARGETS += fuzz-telemetry

# fuzz_run PKG,TARGET,EXECS runs fuzz target TARGET of package directory
# PKG for EXECS executions (every make fuzz target goes through it), then
# copies what it found interesting from the Go cache into
# PKG/testdata/fuzz, where plain go test replays it.
define fuzz_run
	$(GO) test -run '^$$' -fuzz '^$(2)$$' -fuzztime $(3) -fuzzminimizetime 2x -parallel 2 ./$(1)
	@d="$$($(GO) env GOCACHE)/fuzz/github.com/ddstore/ddstore/$(1)/$(2)"; \
	if [ -d "$$d" ]; then mkdir -p $(1)/testdata/fuzz/$(2) && cp -n "$$d"/* $(1)/testdata/fuzz/$(2)/; fi; \
	echo "corpus: $$(ls $(1)/testdata/fuzz/$(2) 2>/dev/null | wc -l) inputs in $(1)/testdata/fuzz/$(2)"
endef

# make test STRESS_RUNS times while stress-ng keeps STRESS_CPUS cores busy;
# it fails unless every run passes. STRESS_PKGS runs go test on those
# packages instead of make test (a dry run: make test-stress STRESS_RUNS=1
# STRESS_PKGS=./configs). Each run's output is in bin/stress/run-N.log.
STRESS_RUNS ?= 10
STRESS_CPUS ?= 2
STRESS_PKGS ?=
test-stress: deps
	@mkdir -p $(BIN)/stress; \
	stress-ng --cpu $(STRESS_CPUS) --timeout 24h --quiet & load=$$!; \
	trap 'kill $$load 2>/dev/null; wait $$load 2>/dev/null' EXIT; \
	sleep 1; kill -0 $$load 2>/dev/null || { echo "test-stress: stress-ng did not start" >&2; exit 1; }; \
	if [ -n "$(STRESS_PKGS)" ]; then run="env DDSTORE_REQUIRE_FABRIC=1 $(GO) test -count=1 -timeout 20m $(STRESS_PKGS)"; \
	else run="$(MAKE) --no-print-directory test"; fi; \
	pass=0; t0=$$(date +%s); \
	for i in $$(seq 1 $(STRESS_RUNS)); do \
	  s=$$(date +%s); \
	  if $$run > $(BIN)/stress/run-$$i.log 2>&1; then pass=$$((pass+1)); r=pass; else r=FAIL; fi; \
	  echo "test-stress: run $$i of $(STRESS_RUNS): $$r in $$(( $$(date +%s) - s )) s ($(BIN)/stress/run-$$i.log)"; \
	  [ $$r = pass ] || grep -E '^(--- FAIL|FAIL|panic)' $(BIN)/stress/run-$$i.log | head -20; \
	done; \
	echo "test-stress: $$run passed $$pass of $(STRESS_RUNS) runs with stress-ng --cpu $(STRESS_CPUS) running ($$(( $$(date +%s) - t0 )) s)"; \
	[ $$pass -eq $(STRESS_RUNS) ]

# 4 ranks read random batches over every path (same-node mapping, tcp
# one-sided reads, shm, tcp gather), SOAK_ROWS rows per path, every row
# checked against its pattern; then 4 ranks in 2 replica groups (width 2)
# over tcp, rank 1 (a replica owner) killed mid-run, the 3 survivors read
# SOAK_ROWS rows between them: 0 mismatches, and the rows that failed over
# to the replica are counted. Prints the rows and the time per path.
SOAK_ROWS ?= 10000000
soak: deps
	DDSTORE_SOAK_ROWS=$(SOAK_ROWS) $(GO) test -count=1 -timeout 120m -run '^TestSoak$$' -v ./engine 2>&1 | \
	  grep -E '^(soak|--- |ok|FAIL|panic)|FAIL:'; exit $${PIPESTATUS[0]}

# The soak's short form in make test: 1 M rows per path, the kill included.
TEST_EXTRA += test-soak
test-soak: deps
	$(MAKE) --no-print-directory soak SOAK_ROWS=1000000

# FuzzTelemetryReader (corrupted segments through Discover, Open,
# Snapshot, ReadRing: typed errors, no panic) and FuzzTelemetryModel (a
# writer's random calls read back: exactly the model's counters,
# histograms, peers and ring) for FUZZ_TELEMETRY_EXECS executions each;
# the inputs they found interesting are kept in telemetry/testdata/fuzz.
FUZZ_TELEMETRY_EXECS ?= 1000000x
fuzz-telemetry: deps
	$(call fuzz_run,telemetry,FuzzTelemetryReader,$(FUZZ_TELEMETRY_EXECS))
	$(call fuzz_run,telemetry,FuzzTelemetryModel,$(FUZZ_TELEMETRY_EXECS))
