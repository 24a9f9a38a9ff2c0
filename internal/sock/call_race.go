//go:build linux && race

package sock

import "syscall"

// Under the race detector the calls go through syscall.Read and
// syscall.Write: the same system calls, plus the detector's annotations
// (a write's bytes happen before the read that receives them, on any
// connection). Raw calls would drop those, and memory handed between a
// client and a server in one test process would look raced. The rest of
// the path (the poller's wait, partial writes, errors) is the same.

// ReadFD is one read(2) of fd into p (EINTR retried): the count and 0, or 0
// and the errno (syscall.EAGAIN when nothing is there yet). p must not be
// empty.
func ReadFD(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, errno := errnoOf(syscall.Read(int(fd), p))
		if errno != syscall.EINTR {
			return n, errno
		}
	}
}

// writeFD is one write(2) of p to fd (EINTR retried), as ReadFD.
func writeFD(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, errno := errnoOf(syscall.Write(int(fd), p))
		if errno != syscall.EINTR {
			return n, errno
		}
	}
}
