package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/troupe-gw/troupe/internal/sock"
)

// ClientMode says which HTTP client an account's transport sends with:
// net/http's (HTTP/2 by ALPN, a read and a write goroutine per connection,
// proxies from the environment) or fasthttp's (HTTP/1.1 only, the request
// written and the answer read on the caller's goroutine). Accounts with an
// Options.Client of their own, and codex accounts (uTLS fingerprints,
// per-account proxies), always use net/http.
type ClientMode uint8

const (
	// ClientAuto sends plain http:// upstreams through fasthttp, unless a
	// proxy from the environment (HTTP_PROXY, NO_PROXY) applies to the URL,
	// and https:// upstreams through net/http, which negotiates HTTP/2.
	ClientAuto ClientMode = iota
	// ClientNetHTTP sends every upstream through net/http.
	ClientNetHTTP
	// ClientHTTP1 is ClientAuto plus https:// upstreams through fasthttp:
	// HTTP/1.1 over crypto/tls with the system roots, no HTTP/2, no proxy.
	// For HTTPS upstreams that speak HTTP/1.1 well (a vLLM or LiteLLM behind
	// a TLS terminator); the public APIs are better served by HTTP/2.
	ClientHTTP1
)

// ParseClientMode parses a configuration value: "auto" (or ""), "nethttp"
// or "http1". Anything else is an error naming the accepted values.
func ParseClientMode(s string) (ClientMode, error) {
	switch s {
	case "", "auto":
		return ClientAuto, nil
	case "nethttp":
		return ClientNetHTTP, nil
	case "http1":
		return ClientHTTP1, nil
	}
	return 0, errors.New(`upstream: client mode: want "auto", "nethttp" or "http1"`)
}

// fastClient keeps one fasthttp.HostClient (one connection pool) per
// upstream scheme and host:port, shared by every account of the process.
type fastClient struct {
	cfg   HTTPConfig
	mu    sync.Mutex
	hosts map[string]*fasthttp.HostClient
}

var sharedFast = sync.OnceValue(func() *fastClient {
	return &fastClient{hosts: make(map[string]*fasthttp.HostClient)}
})

// host returns the pool of u's scheme and host, making it on first use.
func (f *fastClient) host(u *url.URL) *fasthttp.HostClient {
	isTLS := u.Scheme == "https"
	addr := u.Host
	if u.Port() == "" {
		if isTLS {
			addr = net.JoinHostPort(u.Hostname(), "443")
		} else {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	key := u.Scheme + "://" + addr
	f.mu.Lock()
	defer f.mu.Unlock()
	if hc := f.hosts[key]; hc != nil {
		return hc
	}
	d := &net.Dialer{
		Timeout:   orDefault(f.cfg.DialTimeout, 10*time.Second),
		KeepAlive: orDefault(f.cfg.KeepAlive, 30*time.Second),
	}
	dial := sock.Dial(d)
	hc := &fasthttp.HostClient{
		Addr:  addr,
		IsTLS: isTLS,
		Dial:  func(a string) (net.Conn, error) { return dial(context.Background(), "tcp", a) },
		// No cap on connections, as net/http has none per host: a request
		// never fails for want of a free connection.
		MaxConns:            1 << 30,
		MaxIdleConnDuration: orDefault(f.cfg.IdleConnTimeout, fastIdleConn),
		// The answer's head is read whole (bounded by the header timeout);
		// its body streams, so no body size limit applies here.
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: false,
	}
	if isTLS {
		hc.TLSConfig = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
		if f.cfg.TLSClientConfig != nil {
			hc.TLSConfig = f.cfg.TLSClientConfig.Clone()
		}
	}
	f.hosts[key] = hc
	return hc
}

// fastIdleConn is how long an idle fasthttp connection is kept: shorter than
// net/http's 90 s, since fasthttp does not watch idle connections for the
// server's close (net/http's read goroutine does), and a connection the
// server closed is found only by the next request on it.
const fastIdleConn = 20 * time.Second

// probeIdleAfter is how long a pooled connection must have been idle
// before its reuse is preceded by the probe for the server's close
// (idleAlive). Servers close idle keep-alive connections on timers of
// seconds (uvicorn and Node 5 s, gunicorn 2 s, nginx 75 s), and a server
// that means to close right after an answer says so in it (Connection:
// close; fasthttp then does not pool the connection), so a connection used
// within the last second is not worth a system call. Under load every
// reuse is milliseconds after the last, and the probe (a recvfrom(2) and 3
// allocations per request) was 2 % of the gateway's CPU at 1,000 req/s,
// about 5 µs a request (docs/benchmarks.md). A close that crosses the
// request on the wire was never caught by the probe either.
const probeIdleAfter = time.Second

// probeDue reports whether a connection from the pool, made at created and
// last given back at lastUse, is probed before it is reused: it carried a
// request before (a new one was never idle; fasthttp leaves its lastUse
// zero) and has been idle probeIdleAfter or longer.
func (b *base) probeDue(created, lastUse time.Time) bool {
	if !lastUse.After(created) {
		return false
	}
	now := time.Now()
	if b.clock != nil {
		now = b.clock()
	}
	return now.Sub(lastUse) >= probeIdleAfter
}

// alive is idleAlive, or the test's probe in its place.
func (b *base) alive(c net.Conn) bool {
	if b.probe != nil {
		return b.probe(c)
	}
	return idleAlive(c)
}

// useFast reports whether an account whose endpoints are on u sends with
// fasthttp under mode (see ClientMode).
func useFast(u *url.URL, mode ClientMode) bool {
	switch {
	case mode == ClientNetHTTP:
		return false
	case u.Scheme == "https" && mode != ClientHTTP1:
		return false
	}
	// A proxy from the environment is net/http's business (fasthttp's
	// client has none): the account keeps net/http then.
	p, err := http.ProxyFromEnvironment(&http.Request{URL: u})
	return err == nil && p == nil
}

// headerPool recycles the http.Header the providers fill for a fasthttp
// request: it is copied into the fasthttp request and cleared.
var headerPool = sync.Pool{New: func() any { return make(http.Header, 8) }}

// sendFast is send on fasthttp's client: the request is written and the
// answer's head read on the caller's goroutine, on a connection of hc's
// pool. ctx's end closes the connection (so a blocked read or write
// returns) through afterFunc, with no goroutine of its own; the header
// timeout is a read deadline until the head is in.
// The returned body streams from the connection; its Close returns the
// connection to the pool when the body was read to its end, and closes it
// otherwise.
func (b *base) sendFast(ctx context.Context, target *url.URL, body []byte, stream bool, hs headerSetter, req *Request) (*http.Response, error) {
	hc := b.fast
	freq := fasthttp.AcquireRequest()
	freq.Header.SetMethod(http.MethodPost)
	freq.SetRequestURI(target.String())
	freq.Header.SetHost(target.Host)
	h := headerPool.Get().(http.Header)
	hs.setHeader(h, req)
	for k, vs := range h {
		canon := fastCanonical(k)
		for i, v := range vs {
			switch {
			case i > 0:
				freq.Header.Add(k, v)
			case canon:
				// Read only: SetCanonical copies the name and the value.
				freq.Header.SetCanonical(unsafe.Slice(unsafe.StringData(k), len(k)), unsafe.Slice(unsafe.StringData(v), len(v)))
			default:
				freq.Header.Set(k, v)
			}
		}
	}
	clear(h)
	headerPool.Put(h)
	freq.SetBodyRaw(body)

	// A connection from the pool the server may have closed meanwhile
	// (idle probeIdleAfter or longer) is probed, and dropped for another
	// when it was closed. Each pass takes a connection out of the pool, so
	// the loop ends.
	cc, err := hc.AcquireConn(0, false)
	for err == nil && b.probeDue(cc.CreatedTime(), cc.LastUseTime()) && !b.alive(cc.Conn()) {
		hc.CloseConn(cc)
		cc, err = hc.AcquireConn(0, false)
	}
	if err != nil {
		fasthttp.ReleaseRequest(freq)
		return nil, classifyErr(ctx, fastErr(ctx, err), false)
	}
	conn := cc.Conn()
	// The call's end closes the connection, as net/http's does: a blocked
	// read or write returns, and the upstream sees the hang-up.
	stop := afterFunc(ctx, func() { _ = conn.Close() })

	d := b.timeoutFor(stream)
	if d > 0 {
		err = conn.SetDeadline(time.Now().Add(d))
	}
	if err == nil {
		bw := hc.AcquireWriter(conn)
		err = freq.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		hc.ReleaseWriter(bw)
	}
	fasthttp.ReleaseRequest(freq)
	fresp := fasthttp.AcquireResponse()
	var br = hc.AcquireReader(conn)
	if err == nil {
		fresp.StreamBody = true
		err = fresp.ReadLimitBody(br, 0)
	}
	if err == nil && d > 0 {
		err = conn.SetDeadline(time.Time{})
	}
	if err != nil {
		stop()
		fasthttp.ReleaseResponse(fresp)
		hc.CloseConn(cc)
		hc.ReleaseReader(br)
		// The only deadline is the head's: a timeout with ctx alive is it.
		timedOut := d > 0 && ctx.Err() == nil && isTimeout(err)
		if timedOut {
			err = ErrHeaderTimeout
		}
		return nil, classifyErr(ctx, fastErr(ctx, err), timedOut)
	}

	a := new(fastAnswer) // the response and its body in one allocation
	resp, fb := &a.resp, &a.body
	resp.StatusCode = fresp.StatusCode()
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
	resp.Header = fastHeader(&fresp.Header)
	fb.hc, fb.conn, fb.br, fb.resp, fb.stop, fb.parent = hc, conn, br, fresp, stop, ctx
	fb.release = func(reuse bool) {
		if reuse {
			hc.ReleaseConn(cc)
		} else {
			hc.CloseConn(cc)
		}
	}
	if s := fresp.BodyStream(); s != nil {
		fb.stream = s
		fb.chunked = fresp.Header.ContentLength() == -1
	} else {
		fb.eof = true
	}
	resp.Body = fb
	return resp, nil
}

// fastCanonical reports whether k is a header name that fasthttp's Set
// would store as it is: letters, digits, '-' and '_' only, a letter upper
// case first and after a '-' and lower case elsewhere (normalizeHeaderKey's
// form, which is also net/http's canonical form of such a name). sendFast
// sets such a name with SetCanonical, which skips Set's copy and
// normalization of the name and second copy of the value; the providers
// write their names in that form, so the request's bytes are the same
// (TestFastCanonical). Any other name goes through Set.
func fastCanonical(k string) bool {
	if k == "" {
		return false
	}
	want := byte(1) // 1: a letter here must be upper case; 2: lower case
	for i := 0; i < len(k); i++ {
		c := fastNameByte[k[i]]
		if c&want == 0 {
			return false
		}
		want = 2 - c>>2 // after a '-', upper case
	}
	return true
}

// fastNameByte is fastCanonical's table: bit 0 set, the byte may come where
// a letter must be upper case; bit 1, where it must be lower case; bit 2,
// the next letter must be upper case. 0: not in such a name.
var fastNameByte = func() (t [256]byte) {
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = 1
		t[c+'a'-'A'] = 2
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = 3
	}
	t['_'] = 3
	t['-'] = 7
	return t
}()

// fastHeader copies a fasthttp response head into an http.Header, keys in
// canonical form (fasthttp normalizes them the same way). Past the map's
// own, it makes two allocations whatever the number of fields, where a
// string per key, a string per value and a slice per key made three a
// field (docs/benchmarks.md, issue 21): one slice that holds every value
// (each key's slice is a window of it, its capacity capped so that an
// append copies rather than overwrites its neighbour), and one string that
// holds every key and value (each a substring of it). A repeated field's
// second value is appended (an allocation).
func fastHeader(fh *fasthttp.ResponseHeader) http.Header {
	n, size := 0, 0
	for k, v := range fh.All() {
		if string(k) != "Connection" { // hop-by-hop; nothing reads it
			n++
			size += len(k) + len(v)
		}
	}
	h := make(http.Header, n)
	if n == 0 {
		return h
	}
	var sb strings.Builder
	sb.Grow(size)
	for k, v := range fh.All() {
		if string(k) != "Connection" {
			sb.Write(k)
			sb.Write(v)
		}
	}
	all, vals, off := sb.String(), make([]string, n), 0
	for k, v := range fh.All() {
		if string(k) == "Connection" {
			continue
		}
		key := all[off : off+len(k)]
		val := all[off+len(k) : off+len(k)+len(v)]
		off += len(k) + len(v)
		if old, ok := h[key]; ok {
			h[key] = append(old, val)
			continue
		}
		vals[0] = val
		h[key], vals = vals[:1:1], vals[1:]
	}
	return h
}

// fastAnswer is the answer sendFast returns: the response and its body,
// allocated together.
type fastAnswer struct {
	resp http.Response
	body fastBody
}

// fastBody is the streaming body of a fasthttp answer. Reads hold mu; Close
// may come from another goroutine while a Read blocks: it interrupts the
// read with a past deadline and then waits for it.
type fastBody struct {
	hc      *fasthttp.HostClient
	conn    net.Conn
	br      *bufio.Reader
	resp    *fasthttp.Response
	stream  io.Reader
	chunked bool             // the body comes in chunks (Transfer-Encoding: chunked)
	stop    func() bool      // unregisters the context's AfterFunc; false when it ran
	release func(reuse bool) // returns the connection to the pool, or closes it
	parent  context.Context

	mu     sync.Mutex
	eof    bool  // the body was read to its end
	err    error // a read failed: the connection is not reused
	closed bool
}

func (b *fastBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return 0, &Error{Kind: KindConn, Err: errBodyClosed}
	case b.eof:
		return 0, io.EOF
	case b.err != nil:
		return 0, b.err
	}
	n, err := b.stream.Read(p)
	// fasthttp's chunked reader returns one chunk per Read. An SSE upstream
	// sends each event as a chunk, so the gateway would see (and write to
	// its client) one event at a time even when a burst of them came in one
	// read from the connection. Chunks already whole in the buffer are read
	// on, as net/http's chunked reader does: this cannot block.
	for b.chunked && err == nil && n > 0 && n < len(p) && chunkBuffered(b.br) {
		var m int
		m, err = b.stream.Read(p[n:])
		n += m
	}
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.err = bodyErr(b.parent, fastErr(b.parent, err))
		return n, b.err
	}
	return n, err
}

var errBodyClosed = errors.New("upstream: read on a closed body")

// chunkBuffered reports whether br's buffered bytes hold the next chunk of
// a chunked body in full, its size line, data and CRLF (or the last chunk
// with no trailers), so that reading it needs no read from the connection.
// It is asked after a Read that ended inside neither a chunk nor its CRLF:
// one that returned less than asked while bytes stayed buffered ended with
// its chunk, so br is at a size line.
func chunkBuffered(br *bufio.Reader) bool {
	buf, _ := br.Peek(br.Buffered())
	i := bytes.IndexByte(buf, '\n')
	if i < 1 || buf[i-1] != '\r' {
		return false
	}
	size, digits := 0, 0
	for _, c := range buf[:i-1] {
		v := hexVal(c)
		if v < 0 {
			break
		}
		if size = size<<4 | v; size > len(buf) {
			return false
		}
		digits++
	}
	switch {
	case digits == 0:
		return false
	case size == 0:
		return bytes.HasPrefix(buf[i+1:], []byte("\r\n"))
	}
	return len(buf) >= i+1+size+2
}

// hexVal is the value of hex digit c, -1 when c is none.
func hexVal(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// Close ends the call: the connection goes back to the pool when the body
// was read to its end, the call's context had not ended and neither side
// asked to close it; else it is closed.
func (b *fastBody) Close() error {
	if !b.mu.TryLock() {
		// A Read is blocked on the connection: interrupt it, then wait.
		_ = b.conn.Close()
		b.mu.Lock()
	}
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	stopped := b.stop()
	reuse := b.eof && b.err == nil && stopped && !b.resp.ConnectionClose() && b.br.Buffered() == 0
	if !reuse {
		b.release(false) // closes the connection first: nothing reads it any more
	}
	fasthttp.ReleaseResponse(b.resp) // releases the body stream
	b.hc.ReleaseReader(b.br)
	if reuse {
		b.release(true)
	}
	return nil
}

// afterFunc is context.AfterFunc(ctx, f), but a context with an AfterFunc
// method of its own (the gateway's request and attempt contexts) is asked
// directly: context.AfterFunc would wrap f in a context of its own, make
// ctx's Done channel and register that context with it (about four
// allocations more; docs/benchmarks.md, issue 21). Such a method must
// keep context.AfterFunc's contract: f runs in its own goroutine once ctx
// is done, and stop reports whether it kept f from running.
func afterFunc(ctx context.Context, f func()) (stop func() bool) {
	if a, ok := ctx.(interface{ AfterFunc(func()) func() bool }); ok {
		return a.AfterFunc(f)
	}
	return context.AfterFunc(ctx, f)
}

// fastErr maps an error of the fasthttp path to what net/http's would be:
// after ctx ended, ctx's error (the connection was closed for it, so the
// read or write error only says so); a connection the server closed before
// answering, io.ErrUnexpectedEOF (a KindConn, as net/http's EOF).
func fastErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	switch {
	case errors.Is(err, fasthttp.ErrConnectionClosed), errors.Is(err, io.EOF):
		return io.ErrUnexpectedEOF
	}
	return err
}

// isTimeout reports a timeout error (a deadline hit): a net.Error's or
// fasthttp's ErrTimeout, which has Timeout but not Temporary.
func isTimeout(err error) bool {
	te, ok := errors.AsType[interface {
		error
		Timeout() bool
	}](err)
	return ok && te.Timeout()
}
