//go:build linux || darwin || freebsd || netbsd || openbsd

package upstream

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// idleAlive reports whether an idle pooled connection can carry another
// request: its socket has nothing to read and no end of stream. Servers close
// idle keep-alive connections on timers of their own (uvicorn, which serves
// vLLM and most Python endpoints, after 5 s; Node after 5 s; nginx after
// 75 s), and fasthttp, unlike net/http, has no goroutine reading each idle
// connection to notice. A POST written on such a connection fails before the
// first response byte, and cannot be safely replayed; this check finds the
// close first. Cost: one non-blocking recvfrom(MSG_PEEK) per reused
// connection. Bytes waiting on an idle HTTP/1.1 connection (for TLS, a
// close_notify alert) also make it unusable.
func idleAlive(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true // not a socket (a test's pipe): nothing to check
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// EAGAIN: open, nothing to read. n == 0 with no error: the peer's
		// FIN. n > 0 or any other error: not reusable.
		alive = n < 0 && (errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK))
		return true // never wait for readiness: this is a probe
	})
	return err == nil && alive
}
