package cputime

import (
	"runtime"
	"testing"
)

// TestProcessGrows: work done by this process shows in its CPU time.
func TestProcessGrows(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("not read here")
	}
	before := Process()
	x := 0
	for i := 0; Process()-before <= 0 && i < 1e9; i++ {
		x += i
	}
	if Process() <= before {
		t.Fatalf("CPU time did not grow from %v (%d)", before, x)
	}
}
