//go:build unix && !linux

package sock

import "syscall"

// ReadFD is one read(2) of fd into p (EINTR retried): the count and 0, or 0
// and the errno (syscall.EAGAIN when nothing is there yet). p must not be
// empty. Outside Linux it is syscall.Read (doc.go).
func ReadFD(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, errno := errnoOf(syscall.Read(int(fd), p))
		if errno != syscall.EINTR {
			return n, errno
		}
	}
}
