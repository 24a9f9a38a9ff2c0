package upstream

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// DefaultAnthropicBaseURL is the base URL of provider anthropic accounts
// that set none. As with ANTHROPIC_BASE_URL, it has no /v1: the transport
// appends /v1/messages.
const DefaultAnthropicBaseURL = "https://api.anthropic.com"

// DefaultAnthropicVersion is the anthropic-version header sent when the
// client sent none: the only stable version of the Messages API
// (https://docs.anthropic.com/en/api/versioning).
const DefaultAnthropicVersion = "2023-06-01"

// anthropicPassHeaders are the client headers (canonical form) an anthropic
// upstream receives, when the client sent them:
//   - Anthropic-Beta: the beta features the body relies on (Claude Code
//     sends fields such as context_management that are only valid with their
//     beta named here; https://docs.anthropic.com/en/api/beta-headers);
//   - Anthropic-Version: the API version the body is written for (else
//     DefaultAnthropicVersion is sent).
//
// Everything else is dropped, as for openai: X-Stainless-* telemetry,
// Claude Code's X-App and X-Claude-Code-Session-Id, and
// Anthropic-Dangerous-Direct-Browser-Access (Troupe is not a browser).
var anthropicPassHeaders = []string{"Anthropic-Beta", "Anthropic-Version"}

var hvAnthropicVersion = []string{DefaultAnthropicVersion}

// TokenCounter is an optional capability of a Transport: counting a
// request's input tokens the way its upstream does, without generating.
// Find it by type assertion (tr.(upstream.TokenCounter)); the anthropic
// transport has it.
type TokenCounter interface {
	// CountTokens sends req (a Messages request body; Stream is ignored, the
	// answer is always JSON) to the upstream's token counting endpoint and
	// returns its answer, {"input_tokens": N} on success. Errors and
	// non-2xx answers are as for Transport.Do.
	CountTokens(ctx context.Context, req *Request) (*Response, error)
}

// anthropic is the transport of provider anthropic: API keys on the
// Messages API, POST {base}/v1/messages and {base}/v1/messages/count_tokens.
// Bodies are sent as they are.
//
// Protocol: https://docs.anthropic.com/en/api/messages and
// https://docs.anthropic.com/en/api/messages-count-tokens.
type anthropic struct {
	base
	msgURL, msgBetaURL     *url.URL // the second with beta=true added to the query
	countURL, countBetaURL *url.URL
	key                    []string // x-api-key
	userAgent              []string
}

func newAnthropic(a storage.Account, b base, ua string) (*anthropic, error) {
	u, err := parseBaseURL(a, DefaultAnthropicBaseURL)
	if err != nil {
		return nil, err
	}
	b.pickClient(u)
	if a.Credentials.APIKey == "" {
		return nil, fmt.Errorf("upstream: account %q (anthropic): %w: no API key", a.Name, ErrMissingCredentials)
	}
	if ua == "" {
		ua = DefaultUserAgent
	}
	// A base given with its /v1 (as OpenAI base URLs are) is not doubled.
	prefix := "v1/"
	if strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/v1") {
		prefix = ""
	}
	t := &anthropic{
		base:      b,
		msgURL:    endpointURL(u, prefix+"messages"),
		countURL:  endpointURL(u, prefix+"messages/count_tokens"),
		key:       []string{a.Credentials.APIKey},
		userAgent: []string{ua},
	}
	t.msgBetaURL, t.countBetaURL = withBeta(t.msgURL), withBeta(t.countURL)
	return t, nil
}

// withBeta returns a copy of u whose query also has beta=true (unless it
// already has a beta parameter), shared like endpointURL's.
func withBeta(u *url.URL) *url.URL {
	return endpoints.get(u.String()+" beta", func() *url.URL {
		c := *u
		q := c.Query()
		if !q.Has("beta") {
			if c.RawQuery != "" {
				c.RawQuery += "&"
			}
			c.RawQuery += "beta=true"
		}
		return &c
	})
}

// Do sends req to {base}/v1/messages; see New for the headers. A client
// query of beta=true (Request.RawQuery; Claude Code sends it) is kept.
func (t *anthropic) Do(ctx context.Context, req *Request) (*Response, error) {
	if req.Endpoint != translate.Messages {
		return nil, unsupported(storage.ProviderAnthropic, req.Endpoint)
	}
	target := t.msgURL
	if wantsBeta(req.RawQuery) {
		target = t.msgBetaURL
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

// CountTokens sends req to {base}/v1/messages/count_tokens, always asking
// for JSON; see TokenCounter. req.Endpoint must be translate.Messages (or 0).
func (t *anthropic) CountTokens(ctx context.Context, req *Request) (*Response, error) {
	if req.Endpoint != translate.Messages && req.Endpoint != 0 {
		return nil, unsupported(storage.ProviderAnthropic, req.Endpoint)
	}
	target := t.countURL
	if wantsBeta(req.RawQuery) {
		target = t.countBetaURL
	}
	jr := *req
	jr.Stream = false
	resp, err := t.send(ctx, target, req.Body, false, t, &jr)
	if err != nil {
		return nil, err
	}
	if err := checkShape(resp, false); err != nil {
		return nil, err
	}
	return response(resp), nil
}

func (t *anthropic) setHeader(h http.Header, req *Request) {
	h["X-Api-Key"] = t.key
	h["Anthropic-Version"] = hvAnthropicVersion
	h["Content-Type"] = hvJSON
	if req.Stream {
		h["Accept"] = hvSSE
	} else {
		h["Accept"] = hvJSON
	}
	h["User-Agent"] = t.userAgent
	copyHeaders(h, req.Header, anthropicPassHeaders)
	if v := h["Anthropic-Version"]; len(v) != 1 || v[0] == "" {
		h["Anthropic-Version"] = hvAnthropicVersion // the client sent an empty or repeated version
	}
}

// wantsBeta reports whether a client's raw query string has beta=true.
func wantsBeta(raw string) bool {
	if raw == "" {
		return false
	}
	q, err := url.ParseQuery(raw)
	return err == nil && q.Get("beta") == "true"
}
