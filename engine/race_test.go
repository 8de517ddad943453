//go:build race

package engine

// raceScale stretches the ranks' fabric deadlines (FTIMEOUT) and the hang
// guards under the race detector, which make test runs every package
// with: its instrumentation slows each rank several times over. The
// store's own Timeout is not stretched: scenarios time ranks against it.
const raceScale = 4
