//go:build linux && !race

package sock

import (
	"syscall"
	"unsafe"
)

// ReadFD is one raw read(2) of fd into p (EINTR retried): the count and 0,
// or 0 and the errno (syscall.EAGAIN when nothing is there yet). p must not
// be empty.
func ReadFD(fd uintptr, p []byte) (int, syscall.Errno) { return rawIO(syscall.SYS_READ, fd, p) }

// writeFD is one raw write(2) of p to fd (EINTR retried), as ReadFD.
func writeFD(fd uintptr, p []byte) (int, syscall.Errno) { return rawIO(syscall.SYS_WRITE, fd, p) }

// rawIO is read(2) or write(2) (trap) of fd and p, made raw, EINTR retried.
func rawIO(trap, fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		r, _, errno := syscall.RawSyscall(trap, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if errno != syscall.EINTR {
			if errno != 0 {
				return 0, errno
			}
			return int(r), 0
		}
	}
}
