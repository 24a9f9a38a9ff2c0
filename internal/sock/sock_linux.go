//go:build linux

package sock

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// Conn is a TCP connection whose Read and Write make raw system calls (see
// the package doc); every other method is the wrapped *net.TCPConn's. Read
// and Write keep net.Conn's contract: safe for concurrent use, deadlines
// honoured (a timeout is a net.Error whose Timeout is true and which
// errors.Is os.ErrDeadlineExceeded), io.EOF at the peer's orderly close,
// net.ErrClosed after Close, other errors as *net.OpError wrapping an
// *os.SyscallError (errors.Is(err, syscall.ECONNRESET) works).
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn

	rmu     sync.Mutex // one Read at a time: rbuf, rn, rerr are its
	rbuf    []byte
	rn      int
	rerr    syscall.Errno
	readFn  func(fd uintptr) bool // c.read, bound once (a method value per call would allocate)
	wmu     sync.Mutex            // one Write at a time: wbuf, wn, werr are its
	wbuf    []byte
	wn      int
	werr    syscall.Errno
	writeFn func(fd uintptr) bool // c.write, bound once
}

// Wrap returns c as a *Conn when it is a *net.TCPConn, else c unchanged.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	s := &Conn{TCPConn: tc, rc: rc}
	s.readFn = s.read
	s.writeFn = s.write
	return s
}

// Dial returns d's DialContext with each connection wrapped (Wrap).
func Dial(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Wrap(c), nil
	}
}

// Read reads up to len(p) bytes, as net.Conn's Read does.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	c.rbuf, c.rn, c.rerr = p, 0, 0
	err := c.rc.Read(c.readFn)
	n, errno := c.rn, c.rerr
	c.rbuf = nil
	c.rmu.Unlock()
	switch {
	case err != nil:
		return 0, c.opError("read", pollError(err))
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// read is Read's attempt, run by the poller with the socket's fd: false
// (wait for readiness, then call again) on EAGAIN.
func (c *Conn) read(fd uintptr) bool {
	n, errno := ReadFD(fd, c.rbuf)
	if errno == syscall.EAGAIN {
		return false
	}
	c.rn, c.rerr = n, errno
	return true
}

// Write writes all of p unless an error comes first, as net.Conn's Write
// does; n is what was written.
func (c *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.wmu.Lock()
	c.wbuf, c.wn, c.werr = p, 0, 0
	err := c.rc.Write(c.writeFn)
	n, errno := c.wn, c.werr
	c.wbuf = nil
	c.wmu.Unlock()
	switch {
	case err != nil:
		return n, c.opError("write", pollError(err))
	case errno != 0:
		return n, c.opError("write", os.NewSyscallError("write", errno))
	}
	return n, nil
}

// write is Write's attempt: as much of the rest as the socket takes; false
// (wait for room, then call again) on EAGAIN.
func (c *Conn) write(fd uintptr) bool {
	for c.wn < len(c.wbuf) {
		n, errno := writeFD(fd, c.wbuf[c.wn:])
		switch errno {
		case 0:
			c.wn += n
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.werr = errno
			return true
		}
	}
	return true
}

// opError is err as net.Conn's Read and Write give it.
func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// pollError is the poller's error inside syscall.RawConn's *net.OpError
// ("raw-read", "raw-write"): a deadline's os.ErrDeadlineExceeded or
// net.ErrClosed.
func pollError(err error) error {
	if oe, ok := errors.AsType[*net.OpError](err); ok {
		return oe.Err
	}
	return err
}
