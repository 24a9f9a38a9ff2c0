// Package upstream holds the provider transports: how one account's request is
// sent to its upstream (URL, auth headers, body rewrites) and how the answer
// comes back as a stream of bytes.
//
// A Transport never blocks beyond ctx: cancelling ctx aborts the upstream call,
// including a body that is still streaming.
package upstream

import (
	"context"
	"io"
	"net/http"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// Supports reports whether provider p speaks protocol e natively, without translation.
func Supports(p storage.Provider, e translate.Protocol) bool {
	switch p {
	case storage.ProviderOpenAI:
		return e == translate.Chat || e == translate.Responses
	case storage.ProviderOpenAICompat:
		return e == translate.Chat
	case storage.ProviderCodex:
		return e == translate.Responses
	case storage.ProviderAnthropic:
		return e == translate.Messages
	}
	return false
}

// Request is one upstream call on behalf of one account.
type Request struct {
	Endpoint translate.Protocol // the protocol the request speaks, and so the upstream endpoint it goes to
	Stream   bool               // the client asked for a stream
	Body     []byte             // request JSON in Endpoint's protocol; the transport may rewrite fields its provider requires
	Header   http.Header        // client headers worth passing on (may be nil); auth headers are always the account's own
	// RawQuery is the client's query string, without "?" (may be empty).
	// Only what a provider documents is kept: anthropic keeps beta=true;
	// the others ignore it.
	RawQuery string
}

// Response is an upstream answer. Body must be closed by the caller.
//
// When Stream was requested and Status is 2xx, Body is an SSE stream in the
// request Endpoint's protocol. When the client did not ask for a stream but the
// provider can only stream (codex), the transport assembles the final JSON
// itself, so Body is always what the client asked for.
type Response struct {
	Status int
	Header http.Header
	Body   io.ReadCloser
}

// Transport sends requests for one account. Implementations are safe for
// concurrent use; New returns one per account.
type Transport interface {
	// Do sends req upstream. A non-nil error (an *Error) means there is no
	// usable answer: none was received (dial, TLS, timeout, cancellation), the
	// answer had the wrong shape or ended early (KindProtocol), or the request
	// cannot go to this provider (KindRequest). Upstream error statuses are
	// returned as a Response with that Status and the upstream's body.
	Do(ctx context.Context, req *Request) (*Response, error)
}
