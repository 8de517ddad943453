//go:build !race

package testkit

// Race reports whether the tests run under the race detector (see race.go).
const Race = false

// RaceScale is 1 without the race detector (see race.go).
const RaceScale = 1
