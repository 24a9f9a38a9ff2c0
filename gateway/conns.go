package gateway

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/troupe-gw/troupe/internal/ratelog"
	"github.com/troupe-gw/troupe/internal/sock"
)

// Client connection limits (docs/configuration.md, "Client connections").
//
// A gateway that runs out of file descriptors must keep serving: fasthttp
// ends Serve on the first accept error that is not a timeout, and
// accept4's EMFILE is not one. connListener sits between the socket and
// fasthttp: it retries temporary accept errors with a capped backoff (as
// net/http does), refuses connections past a global and a per-client-IP
// cap before fasthttp sees them, and counts and logs (rate-limited) both.
// A connection that sends no request head within Config.HeaderTimeout is
// closed by fasthttp's first-byte deadline (Server.ReadTimeout; the body
// gets Config.ReadTimeout from headerReceived), a new one that sent
// nothing with a 408 from guardedConn.silent.

// DefaultHeaderTimeout is Config.HeaderTimeout's default: how long a new
// connection, or a keep-alive one after its first byte, may take to send a
// whole request head.
const DefaultHeaderTimeout = 10 * time.Second

// fdReserve is the number of file descriptors the automatic connection cap
// leaves for everything that is not a client connection before it halves
// the rest (upstream connections, storage, the journal, logs).
const fdReserve = 128

// autoMaxConns is Config.MaxConns's default for a process allowed nofile
// descriptors: half of what is left after fdReserve (a streamed request
// holds two descriptors: the client's and the upstream's), at least 64.
func autoMaxConns(nofile uint64) int {
	if nofile == 0 || nofile > 1<<22 {
		return 1 << 20 // unknown or effectively unlimited
	}
	n := (int(nofile) - fdReserve) / 2
	return max(n, 64)
}

// autoMaxConnsPerIP is Config.MaxConnsPerIP's default: a quarter of the
// global cap, at least 16, so one address cannot take every slot. Behind a
// load balancer every client shares its address: raise or disable it.
func autoMaxConnsPerIP(maxConns int) int {
	return max(maxConns/4, 16)
}

// Accept backoff after a temporary error, as net/http's Server.Serve.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// connListener wraps the front's listener (see the comment at the top of
// this file). Its zero value is not usable; build it with newConnListener.
// Accept is called by one goroutine (fasthttp's accept loop); Close and the
// connections' Close by any.
type connListener struct {
	net.Listener
	maxConns int // < 0: no cap
	maxPerIP int // < 0: no cap
	m        *Metrics
	log      *slog.Logger
	// Rate-limited warnings: a flood must not flood the log too.
	acceptLog, refuseLog *ratelog.Event
	done                 chan struct{}
	once                 sync.Once
	open                 atomic.Int64
	mu                   sync.Mutex
	perIP                map[netip.Addr]int
}

func newConnListener(ln net.Listener, maxConns, maxPerIP int, m *Metrics, log *slog.Logger) *connListener {
	return &connListener{Listener: ln, maxConns: maxConns, maxPerIP: maxPerIP, m: m, log: log,
		acceptLog: ratelog.New(5, 10*time.Second), refuseLog: ratelog.New(5, 10*time.Second),
		done: make(chan struct{}), perIP: map[netip.Addr]int{}}
}

// Accept returns the next connection within the caps. Temporary errors
// (out of descriptors, a connection aborted before it was accepted) are
// retried after a backoff of 5 ms doubling to 1 s; any other error, and
// Close, end it.
func (l *connListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !temporaryAcceptError(err) {
				return nil, err
			}
			delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
			l.m.acceptErrors.Inc()
			if ok, held := l.acceptLog.Take(context.Background(), l.log, slog.LevelWarn); ok {
				l.log.Warn("accept failed: retrying", "err", err.Error(), "retry_in", delay.String(),
					"open_connections", l.open.Load(), "suppressed", held)
			}
			if !sleepOrDone(delay, l.done) {
				return nil, net.ErrClosed
			}
			continue
		}
		delay = 0
		if gc := l.admit(c); gc != nil {
			return gc, nil
		}
	}
}

// admit wraps c when it is within the caps; otherwise it answers it (503
// past the global cap, 429 past the per-IP one), closes it and returns nil.
func (l *connListener) admit(c net.Conn) net.Conn {
	if l.maxConns >= 0 && l.open.Load() >= int64(l.maxConns) {
		l.refuse(c, "global_limit", "503 Service Unavailable", "server_error", "The server has too many open connections; retry shortly.")
		return nil
	}
	ip := connIP(c)
	if l.maxPerIP >= 0 && ip.IsValid() {
		l.mu.Lock()
		n := l.perIP[ip]
		if n >= l.maxPerIP {
			l.mu.Unlock()
			l.refuse(c, "ip_limit", "429 Too Many Requests", "rate_limit_error", "Too many open connections from your address.")
			return nil
		}
		l.perIP[ip] = n + 1
		l.mu.Unlock()
	} else {
		ip = netip.Addr{}
	}
	l.open.Add(1)
	l.m.connsOpen.Inc()
	gc := &guardedConn{Conn: sock.Wrap(c), l: l, ip: ip}
	if tc, ok := c.(*net.TCPConn); ok {
		gc.raw, _ = tc.SyscallConn() // nil on error: every read goes to c
	}
	gc.fresh.Store(true)
	return gc
}

// refuse answers a connection past a cap with a small HTTP response in
// OpenAI's error shape (the protocol is not known before the request) and
// closes it. The write goes to a fresh socket's empty send buffer; its
// deadline keeps a client that never reads from holding the accept loop.
func (l *connListener) refuse(c net.Conn, reason, status, typ, msg string) {
	l.m.connsRefused.WithLabelValues(reason).Inc()
	if ok, held := l.refuseLog.Take(context.Background(), l.log, slog.LevelWarn); ok {
		l.log.Warn("connection refused", "reason", reason, "remote", c.RemoteAddr().String(),
			"open_connections", l.open.Load(), "suppressed", held)
	}
	writeRaw(c, status, "Retry-After: 1\r\n", typ, "too_many_connections", msg)
	_ = c.Close()
}

// writeRaw answers on c, outside fasthttp, with an error in OpenAI's shape
// (the protocol is not known before the request) and Connection: close;
// extra is more header lines, each ending in CRLF. The write's deadline
// keeps a client that never reads from holding the caller.
func writeRaw(c net.Conn, status, extra, typ, code, msg string) {
	body := `{"error":{"message":"` + msg + `","type":"` + typ + `","param":null,"code":"` + code + `"}}`
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write([]byte("HTTP/1.1 " + status + "\r\nConnection: close\r\nContent-Type: application/json\r\n" + extra + "Content-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body))
}

func (l *connListener) release(ip netip.Addr) {
	l.open.Add(-1)
	l.m.connsOpen.Dec()
	if !ip.IsValid() {
		return
	}
	l.mu.Lock()
	if n := l.perIP[ip] - 1; n > 0 {
		l.perIP[ip] = n
	} else {
		delete(l.perIP, ip)
	}
	l.mu.Unlock()
}

// Close closes the listener and wakes an Accept that is backing off.
func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// sleepOrDone sleeps d and reports true, or false as soon as done closes.
func sleepOrDone(d time.Duration, done <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// temporaryAcceptError reports whether an accept error is worth retrying:
// the process or system is out of descriptors or buffers, or a connection
// went away between the handshake and accept.
func temporaryAcceptError(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.ECONNABORTED, syscall.ECONNRESET, syscall.EINTR, syscall.EAGAIN} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// connIP is the client's address (IPv4-mapped IPv6 unmapped), or the zero
// Addr when the connection has none (a pipe in tests, a Unix socket).
func connIP(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// guardedConn gives its slot back exactly once when closed. It also keeps
// the first bytes of the latest request read on it (head, the start of its
// request line): when a head too large to parse is refused (431), fasthttp
// knows nothing of the request, and the answer's shape depends on its path.
type guardedConn struct {
	net.Conn
	l      *connListener
	ip     netip.Addr
	closed atomic.Bool
	// fresh: a response was written (or nothing read yet) since the last
	// Read, so the next Read starts a request. Written by Write, which a
	// WebSocket's writer calls concurrently with its reader.
	fresh atomic.Bool
	head  [64]byte // read only by the goroutine that reads (fasthttp's, before a hijack)
	headN int
	begun bool // a byte has been read on the connection (same goroutine as head)
	// raw is the TCP socket (nil for any other connection), for read1;
	// stash holds what read1 read past its byte, stash[stashOff:stashN]
	// not yet returned (same goroutine as head).
	raw              syscall.RawConn // (read1_unix.go)
	stash            *[stashSize]byte
	stashOff, stashN int
	fill             func(fd uintptr) bool // read1's read of the socket, bound once
	fillErr          error                 // fill's error
}

// stashSize is what a keep-alive connection's first read takes at most
// (read1): a request head and a small body, and at most fasthttp's read
// buffer (16 KiB, New), so that the reader's next read empties it.
const stashSize = 4 << 10

// stashes are read1's buffers, held only from a request's first read to the
// reader's next read.
var stashes = sync.Pool{New: func() any { return new([stashSize]byte) }}

// Read reads, noting the start of a request (see guardedConn): the first
// len(head) bytes read since the last response, over as many reads as
// they take (fasthttp reads a keep-alive connection's first byte alone).
func (c *guardedConn) Read(p []byte) (int, error) {
	n, err := c.read(p)
	if n == 0 && err != nil && !c.begun {
		c.silent(err)
	}
	if n > 0 {
		c.begun = true
		if c.fresh.Load() {
			c.fresh.Store(false)
			c.headN = 0
		}
		if c.headN < len(c.head) {
			c.headN += copy(c.head[c.headN:], p[:n])
		}
	}
	return n, err
}

// read reads into p: from the stash while it holds bytes, else by read1
// for a one-byte read of a TCP socket, else from the connection.
func (c *guardedConn) read(p []byte) (int, error) {
	if c.stash != nil {
		n := copy(p, c.stash[c.stashOff:c.stashN])
		if c.stashOff += n; c.stashOff == c.stashN {
			c.dropStash()
		}
		return n, nil
	}
	if len(p) != 1 || c.raw == nil {
		return c.Conn.Read(p)
	}
	return c.read1(p)
}

// dropStash gives the stash back to the pool.
func (c *guardedConn) dropStash() {
	if c.stash != nil {
		stashes.Put(c.stash)
		c.stash = nil
	}
}

// silent answers a new connection whose first byte did not come within
// Config.HeaderTimeout (err, a read timeout) with 408, as the front answers
// a head cut by the same deadline, and counts it. fasthttp reads a
// connection's first byte alone (Server.ReduceMemoryUsage) and closes the
// connection without an answer when that read fails.
func (c *guardedConn) silent(err error) {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return
	}
	c.begun = true // answered once
	c.l.m.connsTimedOut.Inc()
	writeRaw(c.Conn, "408 Request Timeout", "X-Request-Id: "+newRequestID()+"\r\n", "invalid_request_error", "request_timeout",
		"The request was not received in time.")
}

// Write writes; what is read next starts a new request.
func (c *guardedConn) Write(p []byte) (int, error) {
	if !c.fresh.Load() {
		c.fresh.Store(true)
	}
	return c.Conn.Write(p)
}

// headPath is the request-target of the latest request's line, as far as
// head holds it (nil when it holds none).
func (c *guardedConn) headPath() []byte {
	line := c.head[:c.headN]
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		return nil
	}
	target := line[sp+1:]
	if end := bytes.IndexAny(target, " ?\r\n"); end >= 0 {
		target = target[:end]
	}
	return target
}

func (c *guardedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.ip)
	}
	return c.Conn.Close()
}

// SyscallConn exposes the socket (peek_unix.go looks at it to notice a
// client gone); errors.ErrUnsupported when the connection is no socket.
func (c *guardedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// NetConn returns the wrapped connection.
func (c *guardedConn) NetConn() net.Conn { return c.Conn }
