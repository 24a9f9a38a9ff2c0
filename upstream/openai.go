package upstream

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// DefaultOpenAIBaseURL is the base URL of provider openai accounts that set none.
const DefaultOpenAIBaseURL = "https://api.openai.com/v1"

// openAIPassHeaders are the client headers (canonical form) an openai or
// openai_compat upstream receives, when the client sent them:
//   - Idempotency-Key: makes a retried POST safe to repeat;
//   - X-Client-Request-Id: OpenAI's client-supplied id for tracing a request
//     (https://platform.openai.com/docs/api-reference/debugging-requests);
//   - X-Request-Id: a client's own correlation id.
//
// Everything else is dropped: account-level headers (OpenAI-Organization,
// OpenAI-Project) belong to the account, not the client; SDK telemetry
// (X-Stainless-*) and OpenAI-Beta change nothing Troupe relies on.
var openAIPassHeaders = []string{"Idempotency-Key", "X-Client-Request-Id", "X-Request-Id"}

// openAI is the transport of providers openai (Chat Completions and
// Responses) and openai_compat (Chat Completions only). Bodies are sent as
// they are.
//
// Protocols: https://platform.openai.com/docs/api-reference/chat/create and
// https://platform.openai.com/docs/api-reference/responses/create.
type openAI struct {
	base
	provider storage.Provider
	chatURL  *url.URL
	respURL  *url.URL // nil when the provider does not speak Responses
	// auth ("Bearer <api key>") and userAgent are header values, held as
	// arrays and sliced per request (no allocation): a slice header each
	// plus its own backing array took the struct to the 144-byte size
	// class and 32 bytes more an account (at 10,000 accounts 0.5 MB of
	// live heap); arrays keep it at 128.
	auth      [1]string
	userAgent [1]string
}

func newOpenAI(a storage.Account, b base, ua string) (*openAI, error) {
	def := DefaultOpenAIBaseURL
	if a.Provider == storage.ProviderOpenAICompat {
		def = ""
	}
	u, err := parseBaseURL(a, def)
	if err != nil {
		return nil, err
	}
	b.pickClient(u)
	if a.Credentials.APIKey == "" {
		return nil, fmt.Errorf("upstream: account %q (%s): %w: no API key", a.Name, a.Provider, ErrMissingCredentials)
	}
	if ua == "" {
		ua = DefaultUserAgent
	}
	t := &openAI{
		base:      b,
		provider:  a.Provider,
		chatURL:   endpointURL(u, "chat/completions"),
		auth:      [1]string{"Bearer " + a.Credentials.APIKey},
		userAgent: [1]string{ua},
	}
	if a.Provider == storage.ProviderOpenAI {
		t.respURL = endpointURL(u, "responses")
	}
	return t, nil
}

// Do sends req to {base}/chat/completions or {base}/responses with the
// account's Bearer key, the body unchanged, and Accept: text/event-stream when
// req.Stream (else application/json). A 2xx answer whose Content-Type
// contradicts req.Stream fails with KindProtocol (ErrWrongContentType); an
// endpoint the provider does not speak fails with KindRequest
// (ErrUnsupportedEndpoint) before anything is sent.
func (t *openAI) Do(ctx context.Context, req *Request) (*Response, error) {
	var target *url.URL
	switch req.Endpoint {
	case translate.Chat:
		target = t.chatURL
	case translate.Responses:
		target = t.respURL
	}
	if target == nil {
		return nil, unsupported(t.provider, req.Endpoint)
	}
	resp, err := t.send(ctx, target, req.Body, req.Stream, t, req)
	if err != nil {
		return nil, err
	}
	if err := checkShape(resp, req.Stream); err != nil {
		return nil, err
	}
	return response(resp), nil
}

func (t *openAI) setHeader(h http.Header, req *Request) {
	h["Authorization"] = t.auth[:]
	h["Content-Type"] = hvJSON
	if req.Stream {
		h["Accept"] = hvSSE
	} else {
		h["Accept"] = hvJSON
	}
	h["User-Agent"] = t.userAgent[:]
	copyHeaders(h, req.Header, openAIPassHeaders)
}
