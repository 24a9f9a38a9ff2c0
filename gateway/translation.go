package gateway

// What the gateway asks of protocol translation, in one place. Package
// translate's conversions between Chat Completions, Responses and Messages
// are not there yet: until they are, every request is served by accounts
// that speak the client's protocol themselves (needsNative), so bytes always
// pass through and none of the conversions below is reached.

import (
	"errors"

	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// needsNative reports whether c can only be served by an account speaking
// its protocol itself: for now every request.
func needsNative(*call) bool { return true }

var errNoTranslation = errors.New("gateway: protocol translation is not available")

// upstreamBody is c's body in protocol up: the client's own bytes.
func (s *Server) upstreamBody(c *call, up upstream.Endpoint) ([]byte, *failure) {
	if up == c.endpoint {
		return c.body, nil
	}
	return nil, &failure{verdict: upstream.Verdict{Class: upstream.ClassRequest}, up: up, err: errNoTranslation,
		answer: &APIError{Status: 400, Type: "invalid_request_error", Message: "This account cannot serve this protocol."}}
}

// translateAnswer would convert a non-stream answer of protocol up.
func translateAnswer(*call, upstream.Endpoint, []byte) ([]byte, error) { return nil, errNoTranslation }

// translateErrorBody would convert an upstream error body of protocol up.
func translateErrorBody(_ *call, _ upstream.Endpoint, _ int, body []byte) []byte { return body }

// streamTranslator converts one upstream stream into the client's protocol,
// event by event.
type streamTranslator interface {
	Event(dst []byte, ev translate.Event) ([]byte, error)
	Finish(dst []byte) []byte
	Fail(dst []byte, typ, code, message string) []byte
}

// newStreamTranslator would return the translator of one stream.
func newStreamTranslator(*call, upstream.Endpoint) streamTranslator { return nil }
