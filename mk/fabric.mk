# Package fabric: its C unit tests under sanitizers, and the gather
# protocol's fuzz targets. The plain C tests run in make test (TestGatherCheckC).

.PHONY: test-asan fuzz-gather

FUZZ_TARGETS += fuzz-gather

# The gather validator's C unit tests built with AddressSanitizer and
# UndefinedBehaviorSanitizer (any read past a request aborts).
test-asan: deps
	DDSTORE_ASAN=1 $(GO) test -count=1 -run '^TestGatherCheckC$$' -v ./fabric

# The gather protocol's fuzz targets, FUZZ_GATHER_EXECS executions each,
# against a model (fabric/gcheck_test.go): FuzzGatherRequest (the target's
# validator and reply builder) and FuzzGatherReply (the reader's reply
# check). The inputs they found interesting are kept in fabric/testdata/fuzz
# (go test replays them). fuzz_run is in mk/engine.mk.
FUZZ_GATHER_EXECS ?= 1000000x
fuzz-gather: deps
	$(call fuzz_run,fabric,FuzzGatherRequest,$(FUZZ_GATHER_EXECS))
	$(call fuzz_run,fabric,FuzzGatherReply,$(FUZZ_GATHER_EXECS))
