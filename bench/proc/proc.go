// Package proc reads a process's CPU time and resident memory from
// /proc/PID/stat (through github.com/prometheus/procfs), for the load-test
// harness's CPU-per-request and memory figures. Linux only; elsewhere every
// read fails with an error.
package proc

import (
	"fmt"

	"github.com/prometheus/procfs"
)

// Sample is one reading of a process.
type Sample struct {
	// CPUSeconds is user + system CPU time since the process started
	// (utime + stime, at the kernel's clock-tick resolution, usually 10 ms).
	CPUSeconds float64
	// RSSBytes is the resident set size.
	RSSBytes int64
}

// Read samples process pid.
func Read(pid int) (Sample, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return Sample{}, fmt.Errorf("proc: %w", err)
	}
	st, err := p.Stat()
	if err != nil {
		return Sample{}, fmt.Errorf("proc: %d: %w", pid, err)
	}
	return Sample{CPUSeconds: st.CPUTime(), RSSBytes: int64(st.ResidentMemory())}, nil
}
