//go:build race

package main

// raceScale stretches the timings of these tests under the race detector
// (make test runs every package with -race): its instrumentation slows
// every rank several times over.
const raceScale = 4
