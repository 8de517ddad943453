# The race detector over every package (issue 29): go test -race ./...,
# fabric and engine included. Multi-rank tests re-execute the test binary,
# so every rank runs race-instrumented too; a race in any rank fails its
# test. Part of make test. Deadlines of the fabric and engine tests stretch
# under -race (raceScale in their race_test.go). This is make test's one
# pass over the suite (a second, plain one would take .ci/run past 35
# minutes on 2 cores). What measures runs in the plain pass instead
# (PLAIN_ONLY, in make test): examples/train's TestPathologies checks that
# ddtop names each pathology from measured phase ratios, which the
# detector's slowdown of the Go side shifts (the same trainer ranks run
# here under the other tests of examples/train); engine/ctrl's
# TestScale1024 times 1 024 ranks (here it runs 256 and checks the counts).
PLAIN_ONLY := TestPathologies|TestScale1024

.PHONY: test-race-all

TEST_EXTRA += test-race-all
test-race-all: deps
	$(GO) test -race -count=1 -timeout 40m -skip '^TestPathologies$$' ./...
