//go:build race

package fabric

// raceScale stretches the deadlines of these tests under the race
// detector (make test runs every package with -race): its instrumentation
// slows the Go side of every read several times over.
const raceScale = 4
