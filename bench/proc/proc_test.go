package proc

import (
	"os"
	"runtime"
	"testing"
)

func TestReadSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	s, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSSBytes <= 0 || s.CPUSeconds < 0 {
		t.Fatalf("%+v", s)
	}
	if _, err := Read(1 << 30); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}

// A few milliseconds of work are measured: the threads' run times have
// nanosecond resolution where the stat's ticks would often show 0.
func TestCPUBetweenFine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	before, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.RunNanos == 0 {
		t.Skip("this kernel keeps no scheduler statistics")
	}
	x := 0
	for i := range 2_000_000 {
		x ^= i * i
	}
	after, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d := CPUBetween(before, after); d <= 0 {
		t.Fatalf("CPU between = %v s after a busy loop (x=%d)", d, x)
	}
	// Samples without run times fall back to the ticks.
	if d := CPUBetween(Sample{CPUSeconds: 1}, Sample{CPUSeconds: 1.5}); d != 0.5 {
		t.Fatalf("fallback = %v, want 0.5", d)
	}
	if d := CPUBetween(Sample{CPUSeconds: 1, RunNanos: 9}, Sample{CPUSeconds: 1.25, RunNanos: 5}); d != 0.25 {
		t.Fatalf("after a thread exited = %v, want the ticks' 0.25", d)
	}
}
