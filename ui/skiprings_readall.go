//go:build ddtop_readall

package ui

// skipRingsLive is false in the ddtop_readall build: every poll reads the
// rings, as before format v4 (hotpath.sh's base for the ranks view).
const skipRingsLive = false
