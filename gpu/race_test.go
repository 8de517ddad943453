//go:build race

package gpu

// raceScale stretches the busy periods of these tests under the race
// detector, whose instrumentation slows the host side between driver
// calls (and make test-race runs on a loaded machine).
const raceScale = 2
