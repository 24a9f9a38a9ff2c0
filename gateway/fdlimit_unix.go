//go:build unix

package gateway

import "syscall"

// fdLimit is the process's soft limit on open file descriptors (Go raises
// it to the hard limit at start), or 0 when it cannot be read.
func fdLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return uint64(rl.Cur)
}
