# The race detector over every package (issue 29): go test -race ./...,
# fabric and engine included. Multi-rank tests re-execute the test binary,
# so every rank runs race-instrumented too; a race in any rank fails its
# test. Part of make test. Deadlines of the fabric and engine tests stretch
# under -race (raceScale in their race_test.go). One test stays out:
# examples/train's TestPathologies checks that ddtop names each pathology
# from measured phase ratios, which the detector's slowdown of the Go side
# shifts; it runs in the plain pass, and the same trainer ranks run here
# under the other tests of examples/train.

.PHONY: test-race-all

TEST_EXTRA += test-race-all
test-race-all: deps
	$(GO) test -race -count=1 -timeout 40m -skip '^TestPathologies$$' ./...
