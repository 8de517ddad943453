//go:build race

package engine

// raceScale stretches the ranks' deadlines (the fabric's and the store's
// timeouts, the hang guards) under the race detector, which make test
// runs every package with: its instrumentation slows each rank several
// times over.
const raceScale = 4
