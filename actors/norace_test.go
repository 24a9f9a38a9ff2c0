//go:build !race

package actors

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
