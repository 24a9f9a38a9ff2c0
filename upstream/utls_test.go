package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
)

// helloRecorder notes whether ClientHellos carried GREASE cipher suites,
// which Chrome sends and Go's crypto/tls never does.
type helloRecorder struct {
	mu     sync.Mutex
	grease []bool
}

func (h *helloRecorder) hook(ch *tls.ClientHelloInfo) (*tls.Config, error) {
	g := false
	for _, c := range ch.CipherSuites {
		if c&0x0f0f == 0x0a0a && c>>8 == c&0xff {
			g = true
		}
	}
	h.mu.Lock()
	h.grease = append(h.grease, g)
	h.mu.Unlock()
	return nil, nil
}

func tlsServer(t *testing.T, h2 bool, rec *helloRecorder) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Proto", r.Proto)
		w.Write(append([]byte("echo:"), b...))
	}))
	srv.EnableHTTP2 = h2
	srv.TLS = &tls.Config{GetConfigForClient: rec.hook}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, rt http.RoundTripper, url, body string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("round trip: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestUTLSDial(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		rec := &helloRecorder{}
		srv := tlsServer(t, h2, rec)
		pool := x509.NewCertPool()
		pool.AddCert(srv.Certificate())
		clients := NewClients(ClientsConfig{RootCAs: pool})
		rt, err := clients.RoundTripper("chrome", "")
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := clients.RoundTripper("", ""); again != rt {
			t.Fatal("the default profile does not share the chrome round tripper")
		}
		for i := 0; i < 2; i++ {
			resp := post(t, rt, srv.URL+"/x", "hi")
			b, _ := io.ReadAll(resp.Body)
			want := "HTTP/1.1"
			if h2 {
				want = "HTTP/2.0"
			}
			if string(b) != "echo:hi" || resp.Header.Get("X-Proto") != want {
				t.Fatalf("h2 server %v: %q over %s", h2, b, resp.Header.Get("X-Proto"))
			}
		}
		rec.mu.Lock()
		if len(rec.grease) == 0 || !rec.grease[0] {
			t.Fatalf("h2 server %v: the ClientHello is not Chrome's (grease %v)", h2, rec.grease)
		}
		if h2 && len(rec.grease) != 1 {
			t.Fatalf("h2 server: %d handshakes for 2 requests, want 1 (the connection is reused)", len(rec.grease))
		}
		rec.mu.Unlock()
	}

	// Go's own TLS: no GREASE.
	rec := &helloRecorder{}
	srv := tlsServer(t, true, rec)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	rt, err := NewClients(ClientsConfig{RootCAs: pool}).RoundTripper("go", "")
	if err != nil {
		t.Fatal(err)
	}
	post(t, rt, srv.URL, "x")
	if rec.grease[0] {
		t.Fatal("profile go sent GREASE")
	}
}

func TestUTLSBadCertificateIsTLSError(t *testing.T) {
	srv := tlsServer(t, true, &helloRecorder{})
	rt, _ := NewClients(ClientsConfig{}).RoundTripper("firefox", "") // system roots: the test cert is unknown
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
	_, err := rt.RoundTrip(req)
	if err == nil || classifyErr(context.Background(), err, false).Kind != KindTLS {
		t.Fatalf("err %v", err)
	}
}

func TestClientsErrors(t *testing.T) {
	c := NewClients(ClientsConfig{})
	if _, err := c.RoundTripper("netscape", ""); !errors.Is(err, ErrUnknownTLSProfile) {
		t.Fatalf("profile: %v", err)
	}
	for _, p := range []string{"ftp://h:1", "http://", "::"} {
		_, err := c.RoundTripper("chrome", p)
		if !errors.Is(err, ErrInvalidProxy) {
			t.Fatalf("proxy %q: %v", p, err)
		}
	}
	_, err := c.RoundTripper("chrome", "ftp://user:hunter2@h:1")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error leaks the proxy password: %v", err)
	}
}

// connectProxy is a minimal HTTP CONNECT proxy that wants Basic user:pw.
func connectProxy(t *testing.T, used *atomic.Int32) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			http.Error(w, "connect only", http.StatusMethodNotAllowed)
			return
		}
		if r.Header.Get("Proxy-Authorization") != "Basic dXNlcjpwdw==" {
			http.Error(w, "auth", http.StatusProxyAuthRequired)
			return
		}
		up, err := net.DialTimeout("tcp", r.Host, 5*time.Second)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		used.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
		go func() { io.Copy(up, conn); up.Close() }()
		io.Copy(conn, up)
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestUTLSThroughConnectProxy(t *testing.T) {
	var used atomic.Int32
	purl := connectProxy(t, &used)
	srv := tlsServer(t, true, &helloRecorder{})
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	c := NewClients(ClientsConfig{RootCAs: pool})
	rt, err := c.RoundTripper("chrome", strings.Replace(purl, "http://", "http://user:pw@", 1))
	if err != nil {
		t.Fatal(err)
	}
	resp := post(t, rt, srv.URL, "via proxy")
	if b, _ := io.ReadAll(resp.Body); string(b) != "echo:via proxy" || used.Load() != 1 {
		t.Fatalf("%q, proxy used %d times", b, used.Load())
	}
	// Wrong credentials: the tunnel is refused.
	rt, _ = c.RoundTripper("chrome", strings.Replace(purl, "http://", "http://user:bad@", 1))
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
	if _, err := rt.RoundTrip(req); err == nil || !strings.Contains(err.Error(), "407") {
		t.Fatalf("bad proxy auth: %v", err)
	}
	// Plain http through the proxy (profile go: net/http's own proxy support is bypassed by the dialer).
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("plain")) }))
	defer plain.Close()
	rt, _ = c.RoundTripper("go", strings.Replace(purl, "http://", "http://user:pw@", 1))
	resp = post(t, rt, plain.URL, "")
	if b, _ := io.ReadAll(resp.Body); string(b) != "plain" || used.Load() != 2 {
		t.Fatalf("%q, proxy used %d times", b, used.Load())
	}
}

// socks5Proxy is a minimal SOCKS5 server (RFC 1928, RFC 1929 user/password)
// that connects to IPv4 or domain targets.
func socks5Proxy(t *testing.T, used *atomic.Int32) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 512)
				if _, err := io.ReadFull(c, buf[:2]); err != nil {
					return
				}
				io.ReadFull(c, buf[:buf[1]]) // methods
				c.Write([]byte{5, 2})        // user/password
				io.ReadFull(c, buf[:2])
				user := make([]byte, buf[1])
				io.ReadFull(c, user)
				io.ReadFull(c, buf[:1])
				pw := make([]byte, buf[0])
				io.ReadFull(c, pw)
				if string(user) != "user" || string(pw) != "pw" {
					c.Write([]byte{1, 1})
					return
				}
				c.Write([]byte{1, 0})
				io.ReadFull(c, buf[:4])
				var host string
				switch buf[3] {
				case 1:
					io.ReadFull(c, buf[:4])
					host = net.IP(buf[:4]).String()
				case 3:
					io.ReadFull(c, buf[:1])
					n := int(buf[0])
					io.ReadFull(c, buf[:n])
					host = string(buf[:n])
				default:
					return
				}
				io.ReadFull(c, buf[:2])
				port := int(buf[0])<<8 | int(buf[1])
				up, err := net.DialTimeout("tcp", net.JoinHostPort(host, strconv.Itoa(port)), 5*time.Second)
				if err != nil {
					c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
					return
				}
				defer up.Close()
				used.Add(1)
				c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
				c.SetDeadline(time.Time{})
				go io.Copy(up, c)
				io.Copy(c, up)
			}()
		}
	}()
	return "socks5://user:pw@" + ln.Addr().String()
}

func TestUTLSThroughSOCKS5(t *testing.T) {
	var used atomic.Int32
	purl := socks5Proxy(t, &used)
	srv := tlsServer(t, true, &helloRecorder{})
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	rt, err := NewClients(ClientsConfig{RootCAs: pool}).RoundTripper("chrome", purl)
	if err != nil {
		t.Fatal(err)
	}
	resp := post(t, rt, srv.URL, "via socks")
	if b, _ := io.ReadAll(resp.Body); string(b) != "echo:via socks" || used.Load() != 1 || resp.Header.Get("X-Proto") != "HTTP/2.0" {
		t.Fatalf("%q over %s, proxy used %d times", b, resp.Header.Get("X-Proto"), used.Load())
	}
	bad, _ := NewClients(ClientsConfig{RootCAs: pool}).RoundTripper("chrome", strings.Replace(purl, ":pw@", ":bad@", 1))
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("x"))
	if _, err := bad.RoundTrip(req); err == nil {
		t.Fatal("bad socks credentials: no error")
	}
}

func TestUTLSWebSocketDialer(t *testing.T) {
	rec := &helloRecorder{}
	up := websocket.Upgrader{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		mt, msg, err := c.ReadMessage()
		if err == nil {
			c.WriteMessage(mt, append([]byte("echo:"), msg...))
		}
	}))
	srv.TLS = &tls.Config{GetConfigForClient: rec.hook}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	d, err := NewClients(ClientsConfig{RootCAs: pool}).WebSocketDialer("chrome", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, _, err := d.DialContext(ctx, "wss"+strings.TrimPrefix(srv.URL, "https"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.WriteMessage(websocket.TextMessage, []byte("hi"))
	_, msg, err := conn.ReadMessage()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if err != nil || string(msg) != "echo:hi" || len(rec.grease) == 0 || !rec.grease[0] {
		t.Fatalf("%q %v, chrome hello %v", msg, err, rec.grease)
	}
}
