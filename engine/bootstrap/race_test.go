//go:build race

package bootstrap

// raceScale stretches the tests' time limits under the race detector
// (go test -race), whose instrumentation slows every goroutine several
// times over.
const raceScale = 4
