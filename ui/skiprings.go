//go:build !ddtop_readall

package ui

// skipRingsLive: a running ddtop skips the rings on pages without recent
// calls. Build with -tags ddtop_readall for the ddtop that reads them on
// every page (examples/bench/hotpath.sh pairs the two).
const skipRingsLive = true
