//go:build !race

package main

// raceScale is 1 without the race detector (see race_test.go).
const raceScale = 1
