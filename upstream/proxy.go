package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"

	"golang.org/x/net/proxy"

	"github.com/troupe-gw/troupe/internal/sock"
)

// ErrInvalidProxy is returned for a proxy URL that is not http://, https://,
// socks5:// or socks5h:// with a host. Errors never contain the URL, which
// may hold a password.
var ErrInvalidProxy = errors.New("upstream: invalid proxy URL")

// dialFunc is net.Dialer.DialContext's shape.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// ParseProxy parses and checks a proxy URL: http, https (TLS to the proxy),
// socks5 or socks5h, with a host and optionally user:password. "" is no proxy
// (nil, nil).
func ParseProxy(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil, ErrInvalidProxy
	}
	switch u.Scheme {
	case "http", "https", "socks5", "socks5h":
		return u, nil
	}
	return nil, fmt.Errorf("%w: scheme %q (want http, https, socks5)", ErrInvalidProxy, u.Scheme)
}

// proxyDial returns a dial function that opens TCP connections through p:
// a SOCKS5 handshake (golang.org/x/net/proxy) or an HTTP CONNECT tunnel
// (over TLS to the proxy for https). base dials the proxy itself.
func proxyDial(base *net.Dialer, p *url.URL) (dialFunc, error) {
	switch p.Scheme {
	case "socks5", "socks5h":
		d, err := proxy.FromURL(p, base)
		if err != nil {
			return nil, ErrInvalidProxy
		}
		cd, ok := d.(proxy.ContextDialer)
		if !ok {
			return nil, ErrInvalidProxy
		}
		return cd.DialContext, nil
	case "http", "https":
		return func(ctx context.Context, network, addr string) (net.Conn, error) {
			return connectTunnel(ctx, base, p, addr)
		}, nil
	}
	return nil, ErrInvalidProxy
}

// connectTunnel opens a CONNECT tunnel to addr through the HTTP(S) proxy p
// (RFC 9110 §9.3.6), with Proxy-Authorization: Basic when p has a user.
func connectTunnel(ctx context.Context, base *net.Dialer, p *url.URL, addr string) (net.Conn, error) {
	paddr := p.Host
	if p.Port() == "" {
		if p.Scheme == "https" {
			paddr = net.JoinHostPort(p.Hostname(), "443")
		} else {
			paddr = net.JoinHostPort(p.Hostname(), "80")
		}
	}
	conn, err := sock.Dial(base)(ctx, "tcp", paddr)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	if p.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: p.Hostname(), NextProtos: []string{"http/1.1"}})
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("proxy tls: %w", err)
		}
		conn = tc
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: addr}, Host: addr, Header: http.Header{}}
	if u := p.User; u != nil {
		pw, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pw)))
	}
	err = req.Write(conn)
	var resp *http.Response
	br := bufio.NewReader(conn)
	if err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() || err != nil {
		conn.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("proxy connect: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return nil, fmt.Errorf("proxy connect: status %d", resp.StatusCode)
	}
	conn.SetDeadline(timeZero)
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// bufferedConn is a conn whose first bytes were read into r already.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// envProxyDial dials directly, or through the proxy the environment names
// for https to addr (HTTPS_PROXY, NO_PROXY; http.ProxyFromEnvironment), as
// NewHTTPClient's clients do, for accounts without a configured proxy.
func envProxyDial(base *net.Dialer) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		p, err := http.ProxyFromEnvironment(&http.Request{URL: &url.URL{Scheme: "https", Host: addr}})
		if err != nil || p == nil {
			return sock.Dial(base)(ctx, network, addr)
		}
		d, err := proxyDial(base, p)
		if err != nil {
			return nil, err
		}
		return d(ctx, network, addr)
	}
}
