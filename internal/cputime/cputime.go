// Package cputime reads the process's CPU time, for benchmarks that report
// CPU per operation next to wall-clock time (cpu-ns/op): on a shared machine
// the wall clock counts other processes' turns, the CPU time does not, and
// it counts the work of every goroutine an operation wakes.
package cputime

import "time"

// Process returns the CPU time the process has used so far, user and
// system (getrusage RUSAGE_SELF); 0 where it cannot be read.
func Process() time.Duration { return process() }
