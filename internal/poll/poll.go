// Package poll waits in tests for a condition that another goroutine or
// process makes true and that offers no signal to wait on (a metric, a
// socket closing, a file a child process writes). It re-checks with a short
// backoff and fails the test with what it waited for once the bound passes;
// the bound is generous because CI machines are busy, so it only decides
// how long a broken test takes to fail, never whether a working one passes.
package poll

import (
	"testing"
	"time"
)

// Until re-checks cond until it returns true, or fails t after within with
// "timed out after <within> waiting for <what>".
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	UntilState(t, within, what, func() (bool, string) { return cond(), "" })
}

// UntilState is Until for a condition that also describes the state it saw
// as (ok, state); the last state seen is in the failure message.
func UntilState(t testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	if !Within(within, func() bool {
		ok, state := cond()
		last = state
		return ok
	}) {
		if last != "" {
			t.Fatalf("timed out after %v waiting for %s: last seen %s", within, what, last)
			return
		}
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Within re-checks cond until it returns true (true) or d passes (false),
// for tests that expect a condition may never hold. The pause between
// checks starts at 1 ms and doubles up to 10 ms.
func Within(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		if pause < 10*time.Millisecond {
			pause *= 2
		}
	}
	return true
}
