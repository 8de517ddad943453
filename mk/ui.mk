# ui/ and cmd/ddtop. ddtop report's page is checked in a real browser
# (ui/report TestReportInBrowser: headless Chromium renders report.html and
# the test finds every plot's colours on the screenshot) and ddtop serve
# against a real Prometheus (examples/train TestPrometheus). Both run in
# go test ./... and skip where their program is missing; make test first
# makes sure that both are installed, so there they run.

DEPS += chromium:chromium prometheus:prometheus

.PHONY: ui-check-tools

ui-check-tools: deps
	@command -v chromium >/dev/null && command -v prometheus >/dev/null || \
	  { echo "ui: chromium and prometheus are needed by the report and serve tests" >&2; exit 1; }

TEST_EXTRA += ui-check-tools

# ddtop's CPU cost: 64 synthetic segments, ddtop's ranks view at 10 Hz and
# ddtop serve scraped once a second, each for 30 s (docs/BENCHMARKS.md).
# On a shared machine run it as: flock /work/bench.lock make ddtop-cost
.PHONY: ddtop-cost
ddtop-cost: build
	$(GO) build -o $(BIN)/ ./examples/ddtopcost
	$(BIN)/ddtopcost --ddtop $(BIN)/ddtop --for 30s
