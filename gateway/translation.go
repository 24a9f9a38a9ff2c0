package gateway

// Everything the gateway asks of package translate, in one place: request
// bodies, non-stream answers, upstream error bodies and streams between
// Chat Completions, Responses and Messages. When client and upstream speak
// the same protocol none of this runs: bytes pass through.

import (
	"errors"

	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// needsNative reports whether c can only be served by an account speaking
// its protocol itself: a previous_response_id names state only a Responses
// upstream holds, and compaction is a Responses-only call.
func needsNative(c *call) bool { return c.prevResp != "" || c.compact }

// upstreamBody is c's body in protocol up for an account that is of the
// openai or openai_compat provider (openai) or not: in the client's own protocol its bytes, patched
// when the model or usage must change (patchBody; usage: the gateway asks
// for the usage chunk the client did not), else the translation. Each is
// made once and kept for failovers. A body that cannot be translated is a
// failure of class request carrying the 400 the client gets.
func (s *Server) upstreamBody(c *call, up translate.Protocol, openai bool) (body []byte, usage bool, f *failure) {
	if up == c.endpoint || int(up) >= len(c.translated) {
		usage = wantsUsage(c, up, openai)
		slot := &c.translated[c.endpoint]
		if usage {
			slot = &c.usageBody
		}
		if *slot == nil {
			b, err := patchBody(c, c.body, usage)
			if err != nil {
				return nil, false, &failure{verdict: upstream.Verdict{Class: upstream.ClassRequest}, up: up, err: err, answer: errBadJSON()}
			}
			*slot = b
		}
		return *slot, usage, nil
	}
	if b := c.translated[up]; b != nil {
		return b, false, nil
	}
	b, err := translate.TranslateRequest(c.endpoint, up, c.body, translate.RequestOptions{Model: c.target})
	if err != nil {
		return nil, false, &failure{verdict: upstream.Verdict{Class: upstream.ClassRequest}, up: up, err: err, answer: translateRequestError(err)}
	}
	c.translated[up] = b
	return b, false, nil
}

// translateRequestError is the client's 400 for a request body that cannot
// be translated (err from translate.TranslateRequest).
func translateRequestError(err error) *APIError {
	aerr := &APIError{Status: 400, Type: "invalid_request_error", Message: "The request could not be translated for the upstream: " + err.Error()}
	var te *translate.Error
	if errors.As(err, &te) {
		aerr = &APIError{Status: te.Status, Type: te.Type, Param: te.Param, Message: te.Message}
		if aerr.Status < 400 || aerr.Status > 499 {
			aerr.Status = 400
		}
		if aerr.Type == "" {
			aerr.Type = "invalid_request_error"
		}
	}
	return aerr
}

// translateAnswer converts a non-stream 2xx answer of protocol up into the
// client's protocol, naming the model the client asked for.
func translateAnswer(c *call, up translate.Protocol, body []byte) ([]byte, error) {
	return translate.TranslateResponse(up, c.endpoint, body, translate.ResponseOptions{Model: c.model, Request: c.body})
}

// translateErrorBody converts an upstream error body of protocol up into the
// client's error shape, keeping its status semantics.
func translateErrorBody(c *call, up translate.Protocol, status int, body []byte) []byte {
	return translate.TranslateError(up, c.endpoint, status, body)
}

// streamTranslator converts one upstream stream into the client's protocol,
// event by event (translate.Stream; see its methods for the contract).
type streamTranslator interface {
	Event(dst []byte, ev translate.Event) ([]byte, error)
	Finish(dst []byte) []byte
	Fail(dst []byte, typ, code, message string) []byte
}

// newStreamTranslator returns the translator of one stream of protocol up
// for client c.
// A Messages client's message_start gets the request's estimated input
// tokens (translate.StreamOptions.InputTokens): clients read the prompt's
// size there, and the upstream's count comes only with the stream's end.
func newStreamTranslator(c *call, up translate.Protocol) streamTranslator {
	opts := translate.StreamOptions{Model: c.model, IncludeUsage: c.clientUsage, Request: c.body}
	if c.endpoint == translate.Messages {
		opts.InputTokens = estimateInputTokens(c.body)
	}
	return translate.NewStream(up, c.endpoint, opts)
}
