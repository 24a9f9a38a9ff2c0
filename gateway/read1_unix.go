//go:build unix

package gateway

import (
	"io"
	"net"
	"os"
	"syscall"

	"github.com/troupe-gw/troupe/internal/sock"
)

// read1 is a one-byte read: fasthttp reads the first byte of a keep-alive
// connection's next request alone (Server.ReduceMemoryUsage), so that a
// connection waiting for it holds no buffer, and then the rest of the
// request: three read system calls a request (the wait's EAGAIN, the byte,
// the rest). read1 waits for the socket with no buffer held either, then
// takes what it holds, up to stashSize, into a pooled buffer: p gets the
// first byte and the reader's next read the rest, two read system calls a
// request (docs/benchmarks.md, issue 21, "the closed loop (closed)").
// Deadlines apply as to Read (the socket's poller waits).
func (c *guardedConn) read1(p []byte) (int, error) {
	if c.fill == nil {
		c.fill = c.fillStash // bound once a connection: a closure a read would escape
	}
	err := c.raw.Read(c.fill)
	if err == nil && c.fillErr != nil {
		err = &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", c.fillErr)}
	}
	if err == nil && c.stashN <= 0 {
		err = io.EOF
	}
	if err != nil {
		c.dropStash()
		return 0, err
	}
	p[0] = c.stash[0]
	if c.stashOff = 1; c.stashN == 1 {
		c.dropStash()
	}
	return 1, nil
}

// fillStash is read1's read of the socket fd, run by its poller: into a
// pooled stash; false (wait, then call again) on EAGAIN, with the stash
// given back so that nothing is held while the poller waits.
func (c *guardedConn) fillStash(fd uintptr) bool {
	c.stash = stashes.Get().(*[stashSize]byte)
	n, errno := sock.ReadFD(fd, c.stash[:]) // raw: no sysmon wake-up (internal/sock)
	if errno == syscall.EAGAIN {
		c.dropStash()
		return false
	}
	c.stashN, c.fillErr = n, nil
	if errno != 0 {
		c.stashN, c.fillErr = -1, errno
	}
	return true
}
