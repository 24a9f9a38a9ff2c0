package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
)

// ErrorKind says why an upstream call produced no usable HTTP answer, so the
// gateway can decide failover without matching error strings. The zero value
// is KindUnknown.
type ErrorKind uint8

// Error kinds, in the order a call goes through its phases.
const (
	KindUnknown ErrorKind = iota // not an *Error, or not classified
	// KindRequest: the request cannot be sent as given to this provider
	// (endpoint not supported, body not a JSON object). Not the account's
	// fault; no bytes were sent.
	KindRequest
	// KindDial: no connection could be made (DNS, refused, unreachable, dial
	// timeout, proxy CONNECT failure). No bytes of the request reached the upstream.
	KindDial
	// KindTLS: the TLS handshake failed or timed out (certificate, alert,
	// protocol mismatch). No bytes of the request reached the upstream.
	KindTLS
	// KindTimeout: the upstream did not answer in time (Options.HeaderTimeout,
	// the caller's ctx deadline, a network read timeout). The request may have
	// been processed.
	KindTimeout
	// KindCanceled: the caller cancelled ctx (the client went away). Not the
	// upstream's fault.
	KindCanceled
	// KindConn: the connection broke after it was made (reset, closed before
	// the response head, or in the middle of the body). Transient.
	KindConn
	// KindProtocol: the upstream answered with the wrong shape: JSON where SSE
	// was expected or the reverse, an SSE stream that ended without a terminal
	// event (ErrTruncated) or without any event (ErrEmptyStream), an event past
	// the size limit, a terminal event without its object. Transient.
	KindProtocol
)

var kindNames = [...]string{"unknown", "request", "dial", "tls", "timeout", "canceled", "conn", "protocol"}

// String returns the kind's lower-case name ("dial", "tls", "timeout", …),
// suitable as a metric label.
func (k ErrorKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Error is the error Transport.Do (and reads of a Response.Body it returned)
// fail with: a Kind for decisions and the underlying error for people. Error
// strings never contain credentials: they are only ever sent in headers, and
// Go's HTTP client strips a password from the URLs it quotes.
//
// The idea follows Caddy's reverse proxy DialError
// (https://github.com/caddyserver/caddy/blob/master/modules/caddyhttp/reverseproxy/reverseproxy.go),
// which marks failures that happened before the request was sent.
type Error struct {
	Kind ErrorKind
	Err  error // the cause; never nil
}

// Error returns "upstream <kind>: <cause>".
func (e *Error) Error() string {
	return "upstream " + e.Kind.String() + ": " + e.Err.Error()
}

// Unwrap returns the cause, so errors.Is(err, context.Canceled),
// errors.Is(err, ErrTruncated) and errors.As(err, &netErr) work.
func (e *Error) Unwrap() error { return e.Err }

// Sent reports whether the request may have reached the upstream (false for
// KindRequest, KindDial and KindTLS: retrying elsewhere cannot duplicate work).
func (e *Error) Sent() bool {
	switch e.Kind {
	case KindRequest, KindDial, KindTLS:
		return false
	}
	return true
}

// KindOf returns the Kind of the first *Error in err's chain, or KindUnknown.
func KindOf(err error) ErrorKind {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Kind
	}
	return KindUnknown
}

// Causes wrapped in an *Error, for errors.Is.
var (
	// ErrUnsupportedEndpoint: the provider does not speak the request's
	// Endpoint natively (see Supports). Kind is KindRequest.
	ErrUnsupportedEndpoint = errors.New("endpoint not supported by this provider")
	// ErrEmptyStream: a 2xx SSE answer ended before its first event. Kind is KindProtocol.
	ErrEmptyStream = errors.New("stream ended before any event (empty stream)")
	// ErrTruncated: a 2xx SSE answer ended (cleanly) without a terminal event.
	// Kind is KindProtocol.
	ErrTruncated = errors.New("stream ended without a terminal event (truncated)")
	// ErrWrongContentType: JSON where an SSE stream was asked for, or an SSE
	// stream where JSON was. Kind is KindProtocol.
	ErrWrongContentType = errors.New("unexpected content type")
	// ErrHeaderTimeout: the response head did not arrive within
	// Options.HeaderTimeout. Kind is KindTimeout.
	ErrHeaderTimeout = errors.New("timeout awaiting response headers")
)

// Errors New returns, for errors.Is. Their messages name the account, never
// its credentials.
var (
	// ErrUnknownProvider: the account's provider has no transport.
	ErrUnknownProvider = errors.New("no transport for this provider")
	// ErrMissingCredentials: the account lacks the secret its provider needs.
	ErrMissingCredentials = errors.New("missing credentials")
	// ErrInvalidBaseURL: the account's base URL is not an absolute http(s) URL.
	ErrInvalidBaseURL = errors.New("invalid base URL")
)

// classifyErr wraps err, returned by http.Client.Do or a body read, in an
// *Error. parent is the caller's ctx; headerTimedOut says the per-request
// header timer fired.
func classifyErr(parent context.Context, err error, headerTimedOut bool) *Error {
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	if perr := parent.Err(); perr != nil {
		if errors.Is(perr, context.DeadlineExceeded) {
			return &Error{Kind: KindTimeout, Err: err}
		}
		return &Error{Kind: KindCanceled, Err: err}
	}
	if headerTimedOut {
		return &Error{Kind: KindTimeout, Err: ErrHeaderTimeout}
	}
	return &Error{Kind: kindOfNetErr(err), Err: err}
}

// kindOfNetErr sorts an error from net/http by the phase it happened in.
func kindOfNetErr(err error) ErrorKind {
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return KindDial
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && (op.Op == "dial" || op.Op == "proxyconnect") {
		return KindDial
	}
	if isTLSErr(err) {
		return KindTLS
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return KindTimeout
	}
	if errors.Is(err, context.Canceled) {
		return KindCanceled
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return KindTimeout
	}
	return KindConn
}

// isTLSErr reports a TLS handshake failure.
func isTLSErr(err error) bool {
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*HandshakeError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return true
	}
	// net/http's TLS handshake timeout is an unexported type; its text is the
	// only thing that tells it from other timeouts.
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "net/http: TLS handshake timeout" {
			return true
		}
	}
	return false
}

// bodyErr wraps a failed read of a response body. io.EOF is not an error;
// io.ErrUnexpectedEOF (a body cut short) is KindConn.
func bodyErr(parent context.Context, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return classifyErr(parent, err, false)
}
