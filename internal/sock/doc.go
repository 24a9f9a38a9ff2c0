// Package sock reads and writes the gateway's TCP sockets with raw system
// calls, so that a request's socket I/O does not wake the Go runtime's
// monitor thread (sysmon).
//
// Why: a Go system call made through the syscall package (what net.Conn's
// Read and Write do) enters the runtime's syscall state, and the first one
// after the process went idle wakes sysmon from its deep sleep and resets its
// poll interval to 20 µs. A gateway at a moderate rate (1,000 req/s on two
// cores) goes idle between requests, so every request woke sysmon, which then
// slept and woke every 20 µs until the process went idle again: 13 % of the
// gateway's CPU at 1k req/s, in context switches alone (docs/benchmarks.md,
// issue 21, "sysmon"). A socket in non-blocking mode never blocks a read or
// write, so the runtime has nothing to retake while one runs, and the raw
// call (syscall.RawSyscall: no entersyscall, no exitsyscall) is safe; the wait
// for readiness is the runtime's network poller's, as for net.Conn
// (syscall.RawConn's Read and Write), with the connection's deadlines.
//
// What it gives up: sysmon, left asleep, wakes for the next timer or a
// syscall made the usual way (file I/O, a database client) rather than at
// once, so a goroutine that runs on the CPU for long without a function call
// is preempted later than the runtime's usual 10 ms. The garbage collector's
// preemption does not depend on sysmon.
//
// On systems other than Linux, Wrap returns the connection as it is.
package sock
