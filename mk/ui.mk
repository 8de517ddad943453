# ui/ and cmd/ddtop. ddtop report's page is checked in a real browser:
# headless Chromium renders report.html and the test finds every plot's
# colours on the screenshot (go test ./... skips it where no Chromium is).

DEPS += chromium:chromium

.PHONY: ddtop-report-check

ddtop-report-check: deps
	DDTOP_REQUIRE_BROWSER=1 $(GO) test -count=1 -run TestReportInBrowser ./ui/report

TEST_EXTRA += ddtop-report-check
