package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fasthttp/websocket"
	utls "github.com/refraction-networking/utls"
)

var timeZero time.Time

// TLS ClientHello profiles for codex accounts (github.com/refraction-networking/utls
// v1.8.2 parrots). "go" is Go's own crypto/tls, without uTLS.
var tlsProfiles = map[string]utls.ClientHelloID{
	"chrome":     utls.HelloChrome_Auto,
	"firefox":    utls.HelloFirefox_Auto,
	"safari":     utls.HelloSafari_Auto,
	"edge":       utls.HelloEdge_Auto,
	"ios":        utls.HelloIOS_Auto,
	"randomized": utls.HelloRandomized,
}

// DefaultTLSProfile is the ClientHello profile of codex accounts when none is
// configured.
const DefaultTLSProfile = "chrome"

// TLSProfiles returns the names of the known ClientHello profiles, sorted,
// "go" included.
func TLSProfiles() []string {
	out := []string{"go"}
	for k := range tlsProfiles {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ErrUnknownTLSProfile is returned for a ClientHello profile name not in TLSProfiles.
var ErrUnknownTLSProfile = errors.New("upstream: unknown TLS profile")

// ClientsConfig configures Clients.
type ClientsConfig struct {
	HTTP HTTPConfig // timeouts and pool sizes of every client
	// RootCAs verifies upstream certificates; nil means the system roots.
	RootCAs *x509.CertPool
}

// Clients hands out HTTP round trippers by (TLS profile, proxy), building
// each once so accounts with the same profile and proxy share one
// connection pool. Safe for concurrent use.
type Clients struct {
	cfg ClientsConfig
	mu  sync.Mutex
	rts map[string]http.RoundTripper
	wss map[string]*websocket.Dialer
}

// NewClients returns an empty set of clients.
func NewClients(cfg ClientsConfig) *Clients {
	return &Clients{cfg: cfg, rts: make(map[string]http.RoundTripper), wss: make(map[string]*websocket.Dialer)}
}

// WebSocketDialer returns the WebSocket dialer for profile and proxyURL, as
// RoundTripper does for HTTP: the same ClientHello (with ALPN http/1.1, as
// an upgrade needs) through the same proxy. Errors as RoundTripper's.
func (c *Clients) WebSocketDialer(profile, proxyURL string) (*websocket.Dialer, error) {
	rt, err := c.RoundTripper(profile, proxyURL)
	if err != nil {
		return nil, err
	}
	key := profile + "\x00" + proxyURL
	c.mu.Lock()
	defer c.mu.Unlock()
	if d, ok := c.wss[key]; ok {
		return d, nil
	}
	d := &websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 16 << 10, WriteBufferSize: 16 << 10}
	switch t := rt.(type) {
	case *utlsTransport:
		d.NetDialContext = t.dial
		d.NetDialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			return t.dialTLS(ctx, network, addr, true)
		}
	case *http.Transport:
		d.NetDialContext = t.DialContext
		if c.cfg.RootCAs != nil {
			d.TLSClientConfig = &tls.Config{RootCAs: c.cfg.RootCAs}
		}
	}
	c.wss[key] = d
	return d, nil
}

// RoundTripper returns the round tripper for profile (a TLSProfiles name; ""
// is DefaultTLSProfile) through proxyURL ("" for a direct connection; see
// ParseProxy). Errors wrap ErrUnknownTLSProfile or ErrInvalidProxy and never
// contain the proxy URL.
func (c *Clients) RoundTripper(profile, proxyURL string) (http.RoundTripper, error) {
	if profile == "" {
		profile = DefaultTLSProfile
	}
	if _, ok := tlsProfiles[profile]; !ok && profile != "go" {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownTLSProfile, profile, strings.Join(TLSProfiles(), ", "))
	}
	p, err := ParseProxy(proxyURL)
	if err != nil {
		return nil, err
	}
	key := profile + "\x00" + proxyURL
	c.mu.Lock()
	defer c.mu.Unlock()
	if rt, ok := c.rts[key]; ok {
		return rt, nil
	}
	rt, err := c.build(profile, p)
	if err != nil {
		return nil, err
	}
	c.rts[key] = rt
	return rt, nil
}

func (c *Clients) build(profile string, p *url.URL) (http.RoundTripper, error) {
	hc := c.cfg.HTTP
	if c.cfg.RootCAs != nil {
		hc.TLSClientConfig = &tls.Config{RootCAs: c.cfg.RootCAs}
	}
	std := NewHTTPClient(hc).Transport.(*http.Transport)
	base := &net.Dialer{Timeout: orDefault(hc.DialTimeout, 10*time.Second), KeepAlive: orDefault(hc.KeepAlive, 30*time.Second)}
	dial := envProxyDial(base)
	if p != nil {
		d, err := proxyDial(base, p)
		if err != nil {
			return nil, err
		}
		dial = d
	}
	std.Proxy = nil // the dial function already goes through the proxy
	std.DialContext = dial
	if profile == "go" {
		return std, nil
	}
	u := &utlsTransport{
		id:        tlsProfiles[profile],
		dial:      dial,
		roots:     c.cfg.RootCAs,
		handshake: orDefault(hc.TLSHandshakeTimeout, 10*time.Second),
		h1:        std,
	}
	std.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return u.dialTLS(ctx, network, addr, true)
	}
	std.ForceAttemptHTTP2 = false
	std.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // h1 only; h2 goes through u.h2
	u.h2 = newH2Transport(func(ctx context.Context, network, addr string) (net.Conn, error) {
		return u.dialTLS(ctx, network, addr, false)
	})
	return u, nil
}

// newH2Transport returns a net/http Transport that speaks only HTTP/2 over
// the connections dialTLS returns. net/http negotiates h2 itself only on a
// *crypto/tls.Conn; a uTLS connection is not one, so the transport takes it
// as a connection on which HTTP/2 starts with prior knowledge (its
// UnencryptedHTTP2 protocol) — dialTLS has already run the TLS handshake and
// made sure the server chose h2, so the bytes on the wire are h2 over TLS.
// Idle connections are pinged after 30 s and closed when the ping is not
// answered within 15 s.
func newH2Transport(dialTLS func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Transport{
		DialTLSContext: dialTLS,
		Protocols:      &p,
		HTTP2:          &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}
}

// errNotH2 is the h2 dialer's answer when the server chose HTTP/1.1.
var errNotH2 = errors.New("upstream: server did not negotiate h2")

// utlsTransport sends https requests over TLS connections whose ClientHello
// is a uTLS parrot: HTTP/2 when the server accepts it (ALPN h2), else
// HTTP/1.1 on a connection whose ALPN offers only http/1.1 (remembered per
// host). Plain http requests use h1 directly.
type utlsTransport struct {
	id        utls.ClientHelloID
	dial      dialFunc
	roots     *x509.CertPool
	handshake time.Duration
	h1        *http.Transport
	h2        *http.Transport
	h1Hosts   sync.Map // host:port → struct{}: servers that refused h2
}

// RoundTrip implements http.RoundTripper.
func (u *utlsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		return u.h1.RoundTrip(req)
	}
	if _, ok := u.h1Hosts.Load(req.URL.Host); ok {
		return u.h1.RoundTrip(req)
	}
	resp, err := u.h2.RoundTrip(req)
	if err != nil && errors.Is(err, errNotH2) {
		u.h1Hosts.Store(req.URL.Host, struct{}{})
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return nil, err
			}
			body, berr := req.GetBody()
			if berr != nil {
				return nil, berr
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
		return u.h1.RoundTrip(req)
	}
	return resp, err
}

// dialTLS dials addr and runs the uTLS handshake with the profile's
// ClientHello; h1 replaces its ALPN offer with http/1.1 only. Without h1 a
// server that does not pick h2 fails the dial with errNotH2.
func (u *utlsTransport) dialTLS(ctx context.Context, network, addr string, h1 bool) (net.Conn, error) {
	raw, err := u.dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		raw.Close()
		return nil, err
	}
	cfg := &utls.Config{ServerName: host, RootCAs: u.roots}
	var uc *utls.UConn
	if h1 {
		spec, err := utls.UTLSIdToSpec(u.id)
		if err != nil {
			raw.Close()
			return nil, fmt.Errorf("utls profile: %w", err)
		}
		for _, ext := range spec.Extensions {
			if a, ok := ext.(*utls.ALPNExtension); ok {
				a.AlpnProtocols = []string{"http/1.1"}
			}
		}
		uc = utls.UClient(raw, cfg, utls.HelloCustom)
		if err := uc.ApplyPreset(&spec); err != nil {
			raw.Close()
			return nil, fmt.Errorf("utls profile: %w", err)
		}
	} else {
		uc = utls.UClient(raw, cfg, u.id)
	}
	hctx, cancel := context.WithTimeout(ctx, u.handshake)
	defer cancel()
	if err := uc.HandshakeContext(hctx); err != nil {
		raw.Close()
		return nil, &HandshakeError{Err: err}
	}
	proto := uc.ConnectionState().NegotiatedProtocol
	if !h1 && proto != "h2" {
		uc.Close()
		return nil, errNotH2
	}
	if h1 && proto != "" && !slices.Contains([]string{"http/1.1"}, proto) {
		uc.Close()
		return nil, fmt.Errorf("utls: server chose %q over http/1.1", proto)
	}
	return uc, nil
}

// HandshakeError is a failed uTLS handshake (classified as KindTLS).
type HandshakeError struct{ Err error }

// Error returns "utls handshake: " and the cause.
func (e *HandshakeError) Error() string { return "utls handshake: " + e.Err.Error() }

// Unwrap returns the handshake's error.
func (e *HandshakeError) Unwrap() error { return e.Err }
