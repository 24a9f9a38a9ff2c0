// Package proc reads a process's CPU time and resident memory from /proc
// (through github.com/prometheus/procfs), for the load-test harness's
// CPU-per-request and memory figures. Linux only; elsewhere every read
// fails with an error.
package proc

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// Sample is one reading of a process.
type Sample struct {
	// CPUSeconds is user + system CPU time since the process started
	// (utime + stime of /proc/PID/stat, at the kernel's clock-tick
	// resolution, usually 10 ms; threads that exited included).
	CPUSeconds float64
	// RunNanos is the time the process's live threads have run on a CPU,
	// in nanoseconds: the sum of /proc/PID/task/*/schedstat's first field.
	// 0 when the kernel does not keep scheduler statistics or a thread
	// could not be read. Exact where CPUSeconds is coarse, but a thread
	// that exits takes its time with it (Go keeps its threads).
	RunNanos uint64
	// RSSBytes is the resident set size.
	RSSBytes int64
}

// Read samples process pid. The error is the process's stat's; RunNanos
// is left 0 when the threads' statistics cannot be read.
func Read(pid int) (Sample, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return Sample{}, fmt.Errorf("proc: %w", err)
	}
	st, err := p.Stat()
	if err != nil {
		return Sample{}, fmt.Errorf("proc: %d: %w", pid, err)
	}
	return Sample{CPUSeconds: st.CPUTime(), RunNanos: runNanos(pid), RSSBytes: int64(st.ResidentMemory())}, nil
}

// runNanos sums the run time of pid's threads, 0 when any cannot be read
// (a thread that exits between the listing and its read included).
func runNanos(pid int) uint64 {
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		return 0
	}
	var sum uint64
	for _, t := range threads {
		s, err := t.Schedstat()
		if err != nil {
			return 0
		}
		sum += s.RunningNanoseconds
	}
	return sum
}

// CPUBetween is the CPU time the process spent from before to after, in
// seconds: from the threads' run times when both samples have them and
// they did not go down (no thread exited), else from the coarse
// CPUSeconds.
func CPUBetween(before, after Sample) float64 {
	if before.RunNanos > 0 && after.RunNanos >= before.RunNanos {
		return float64(after.RunNanos-before.RunNanos) / 1e9
	}
	return after.CPUSeconds - before.CPUSeconds
}
