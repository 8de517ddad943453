//go:build !race

package mesh

// raceScale is 1 without the race detector (see race_test.go).
const raceScale = 1
