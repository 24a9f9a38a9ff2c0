//go:build race

package actors

// raceEnabled reports whether the tests run under the race detector, which
// makes the transpiled SQLite engine about 30 times slower.
const raceEnabled = true
