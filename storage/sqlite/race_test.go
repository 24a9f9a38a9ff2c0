//go:build race

package sqlite

// raceEnabled reports whether the tests run under the race detector, which
// (with the checkptr instrumentation it turns on) makes the transpiled SQLite
// engine about 30 times slower.
const raceEnabled = true
