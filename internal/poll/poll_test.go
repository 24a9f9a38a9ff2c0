package poll

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	var n atomic.Int32
	if !Within(time.Minute, func() bool { return n.Add(1) == 5 }) {
		t.Fatal("a condition that becomes true was reported false")
	}
	if n.Load() != 5 {
		t.Fatalf("checked %d times, want 5 (stops at the first true)", n.Load())
	}
	if Within(0, func() bool { return false }) {
		t.Fatal("a condition that never holds was reported true")
	}
}

// fakeTB records Fatalf instead of stopping the test.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = format
	_ = args
}

func TestUntilStateReportsLastState(t *testing.T) {
	f := &fakeTB{TB: t}
	UntilState(f, 0, "x", func() (bool, string) { return false, "y" })
	if f.msg != "timed out after %v waiting for %s: last seen %s" {
		t.Fatalf("failure message %q does not carry the state", f.msg)
	}
	f.msg = ""
	Until(f, time.Minute, "x", func() bool { return true })
	if f.msg != "" {
		t.Fatalf("a met condition failed the test: %q", f.msg)
	}
}
