//go:build race

package ctrl

// raceEnabled: the race detector is on (go test -race).
const raceEnabled = true
