//go:build unix && (!linux || race)

package sock

import "syscall"

// errnoOf is syscall.Read's or Write's result as ReadFD gives it: n and 0,
// or 0 and the errno (EIO for an error that is no errno, which syscall's
// Read and Write never return).
func errnoOf(n int, err error) (int, syscall.Errno) {
	if err == nil {
		return n, 0
	}
	if errno, ok := err.(syscall.Errno); ok {
		return 0, errno
	}
	return 0, syscall.EIO
}
