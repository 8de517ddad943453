# The race detector over every package (issue 29): go test -race ./...,
# fabric and engine included. Multi-rank tests re-execute the test binary,
# so every rank runs race-instrumented too; a race in any rank fails its
# test. Part of make test.

.PHONY: test-race-all

TEST_EXTRA += test-race-all
test-race-all: deps
	$(GO) test -race -count=1 -timeout 40m ./...
