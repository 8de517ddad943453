//go:build !race

package ctrl

const raceEnabled = false
