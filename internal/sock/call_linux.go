//go:build linux && !race

package sock

import (
	"syscall"
	"unsafe"
)

// ReadFD is one raw read(2) of fd into p (EINTR retried): the count and 0,
// or 0 and the errno (syscall.EAGAIN when nothing is there yet). p must not
// be empty.
func ReadFD(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		r, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if errno != syscall.EINTR {
			if errno != 0 {
				return 0, errno
			}
			return int(r), 0
		}
	}
}

// writeFD is one raw write(2) of p to fd (EINTR retried), as ReadFD.
func writeFD(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		r, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if errno != syscall.EINTR {
			if errno != 0 {
				return 0, errno
			}
			return int(r), 0
		}
	}
}
