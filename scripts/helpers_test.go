package scripts

import (
	"testing"
	"time"
)

// testNow is the fixed clock of the tests.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testOptions seed math.random and lengthen the wall-clock backstops, so
// that a test is never failed by its goroutine being descheduled on a loaded
// machine; the instruction budgets stop runaway code as usual.
// The self-test's own budget too: under the race detector on a loaded
// machine, the self-test of a deep-recursion policy took over the default
// second (TestSelfTestBudget sets its own).
var testOptions = Options{Seed: 1, ScoreTimeout: 5 * time.Second, RouteTimeout: 5 * time.Second, LoadTimeout: 5 * time.Second, SelfTestBudget: 30 * time.Second}

func mustCompile(t testing.TB, name, src string) *Policy {
	t.Helper()
	p, err := Compile(name, src, testOptions)
	if err != nil {
		t.Fatalf("Compile(%s): %v", name, err)
	}
	return p
}

func mustBuiltin(t testing.TB, name string) *Policy {
	t.Helper()
	src, ok := Builtin(name)
	if !ok {
		t.Fatalf("no builtin %q", name)
	}
	return mustCompile(t, name, src)
}
