# Package fabric: its C unit tests under sanitizers, and the gather request
# fuzz target. The plain C tests run in make test (TestGatherCheckC).

.PHONY: test-asan fuzz-gather

FUZZ_TARGETS += fuzz-gather

# The gather validator's C unit tests built with AddressSanitizer and
# UndefinedBehaviorSanitizer (any read past a request aborts).
test-asan: deps
	DDSTORE_ASAN=1 $(GO) test -count=1 -run '^TestGatherCheckC$$' -v ./fabric

# FuzzGatherRequest for FUZZ_GATHER_EXECS executions; the inputs it found
# interesting are kept in fabric/testdata/fuzz (go test replays them).
FUZZ_GATHER_EXECS ?= 1000000x
fuzz-gather: deps
	$(GO) test -run '^$$' -fuzz '^FuzzGatherRequest$$' -fuzztime $(FUZZ_GATHER_EXECS) -parallel 2 ./fabric
	@d="$$($(GO) env GOCACHE)/fuzz/github.com/ddstore/ddstore/fabric/FuzzGatherRequest"; \
	if [ -d "$$d" ]; then mkdir -p fabric/testdata/fuzz/FuzzGatherRequest && cp -n "$$d"/* fabric/testdata/fuzz/FuzzGatherRequest/; \
	echo "corpus: $$(ls fabric/testdata/fuzz/FuzzGatherRequest | wc -l) inputs in fabric/testdata/fuzz/FuzzGatherRequest"; fi
