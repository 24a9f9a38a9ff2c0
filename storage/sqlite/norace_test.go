//go:build !race

package sqlite

// raceEnabled reports whether the tests run under the race detector.
const raceEnabled = false
