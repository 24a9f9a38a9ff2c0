package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/troupe-gw/troupe/internal/poll"
)

// connServer is a server over one canned account built with cfg (so the
// fasthttp settings follow it), served on a fresh 127.0.0.1 port.
func connServer(t *testing.T, cfg Config) (*Server, net.Listener) {
	t.Helper()
	base, sys, _ := testServer(t, 1, cannedTransport{status: 200, ctype: "application/json", body: []byte(`{}`)})
	s := New(cfg, sys, base.store, nil, nil, nil)
	return s, serveTCP(t, s)
}

// get sends GET /healthz on conn and returns the response status (0 and
// the error when none could be read).
func get(conn net.Conn, br *bufio.Reader) (int, error) {
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, err
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// emfileListener fails its first n Accepts with accept4's EMFILE, as a
// process out of file descriptors does.
type emfileListener struct {
	net.Listener
	n int
}

func (l *emfileListener) Accept() (net.Conn, error) {
	if l.n > 0 {
		l.n--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestServeSurvivesEMFILE: before gateway/conns.go, the first EMFILE ended
// fasthttp's Serve and with it the gateway (issue 16, finding 1).
func TestServeSurvivesEMFILE(t *testing.T) {
	base, sys, _ := testServer(t, 1, cannedTransport{status: 200, ctype: "application/json", body: []byte(`{}`)})
	s := New(Config{}, sys, base.store, nil, nil, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(&emfileListener{Listener: ln, n: 4}) }()
	t.Cleanup(func() { s.srv.Shutdown() })
	got := make(chan error, 1)
	go func() {
		conn, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			got <- err
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		code, err := get(conn, bufio.NewReader(conn))
		if err == nil && code != 200 {
			err = fmt.Errorf("status %d", code)
		}
		got <- err
	}()
	select {
	case err := <-served:
		t.Fatalf("Serve ended on a temporary accept error: %v", err)
	case err := <-got:
		if err != nil {
			t.Fatalf("GET /healthz after EMFILE: %v", err)
		}
	}
	if n := testutil.ToFloat64(s.metrics.acceptErrors); n != 4 {
		t.Errorf("troupe_accept_errors_total = %v, want 4", n)
	}
}

// TestConnCaps: a connection past the per-IP cap gets 429, past the global
// cap 503, and a freed slot serves again.
func TestConnCaps(t *testing.T) {
	for _, tc := range []struct {
		name         string
		cfg          Config
		status       int
		reason, want string
	}{
		{"per ip", Config{MaxConns: 100, MaxConnsPerIP: 3}, 429, "ip_limit", "rate_limit_error"},
		{"global", Config{MaxConns: 3, MaxConnsPerIP: -1}, 503, "global_limit", "server_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ln := connServer(t, tc.cfg)
			var held []net.Conn
			for range 3 {
				conn := dialTCP(t, ln)
				if code, err := get(conn, bufio.NewReader(conn)); err != nil || code != 200 {
					t.Fatalf("connection within the cap: %d %v", code, err)
				}
				held = append(held, conn)
			}
			over := dialTCP(t, ln)
			br := bufio.NewReader(over)
			res, err := http.ReadResponse(br, nil) // answered at accept, before any request
			if err != nil {
				t.Fatalf("connection past the cap: %v", err)
			}
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.status || !strings.Contains(string(body), tc.want) {
				t.Fatalf("past the cap: %d %s, want %d %s", res.StatusCode, body, tc.status, tc.want)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("connection past the cap not closed: %v", err)
			}
			if n := testutil.ToFloat64(s.metrics.connsRefused.WithLabelValues(tc.reason)); n != 1 {
				t.Errorf("refused{%s} = %v, want 1", tc.reason, n)
			}
			held[0].Close()
			// The slot is given back when the server sees the close; until
			// then a new connection is refused, after it served.
			poll.UntilState(t, 30*time.Second, "a freed slot to serve again", func() (bool, string) {
				conn := dialTCP(t, ln)
				code, err := get(conn, bufio.NewReader(conn))
				conn.Close()
				return err == nil && code == 200, fmt.Sprintf("%d %v", code, err)
			})
		})
	}
}

// TestHeaderTimeout: a connection that sends nothing is closed after
// HeaderTimeout (before, it held its descriptor for the 60 s read timeout),
// and counted.
func TestHeaderTimeout(t *testing.T) {
	s, ln := connServer(t, Config{HeaderTimeout: 50 * time.Millisecond})
	conn := dialTCP(t, ln) // 20 s deadline: the test fails, never hangs
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("silent connection not answered within 10 s: %v", err)
	}
	if res.StatusCode != 408 {
		t.Fatalf("status %d, want 408", res.StatusCode)
	}
	if n := testutil.ToFloat64(s.metrics.connsTimedOut); n != 1 {
		t.Errorf("troupe_client_connections_header_timeout_total = %v, want 1", n)
	}
	// A slow head is cut by the same deadline; a prompt request is served.
	slow := dialTCP(t, ln)
	io.WriteString(slow, "GET /healthz HTTP/1.1\r\n")
	if res, err := http.ReadResponse(bufio.NewReader(slow), nil); err != nil || res.StatusCode != 408 {
		t.Fatalf("slow head: %v %v", res, err)
	}
	ok := dialTCP(t, ln)
	if code, err := get(ok, bufio.NewReader(ok)); err != nil || code != 200 {
		t.Fatalf("prompt request: %d %v", code, err)
	}
}

func TestAutoConnCaps(t *testing.T) {
	for _, tc := range []struct {
		nofile        uint64
		global, perIP int
	}{{1024, 448, 112}, {256, 64, 16}, {20000, 9936, 2484}, {0, 1 << 20, 1 << 18}} {
		if g, p := autoMaxConns(tc.nofile), autoMaxConnsPerIP(autoMaxConns(tc.nofile)); g != tc.global || p != tc.perIP {
			t.Errorf("nofile %d: caps %d/%d, want %d/%d", tc.nofile, g, p, tc.global, tc.perIP)
		}
	}
}
