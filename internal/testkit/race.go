//go:build race

package testkit

// Race reports whether the tests run under the race detector (go test
// -race).
const Race = true

// RaceScale stretches tests' time limits and hang guards under the race
// detector, whose instrumentation slows every goroutine several times
// over (make test runs every package with -race, on a loaded machine).
const RaceScale = 4
