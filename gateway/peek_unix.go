//go:build unix

package gateway

import (
	"errors"
	"net"
	"syscall"
)

// canPeek reports whether conn is a socket peerClosed can look at.
func canPeek(conn net.Conn) bool {
	_, ok := conn.(syscall.Conn)
	return ok
}

// peerClosed reports whether the peer of conn has closed it (an orderly
// shutdown or a reset), by peeking at one byte without blocking or
// consuming it: recv(MSG_PEEK|MSG_DONTWAIT) returns 0 at end of stream,
// EAGAIN while the connection is open and idle, and data when the client
// has sent more (a pipelined request), which means it is still there.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			closed = n == 0
		case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ENOTCONN):
			closed = true
		}
	})
	return closed
}
