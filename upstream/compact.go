package upstream

import (
	"context"
	"net/http"
	"net/url"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// Compactor is an optional capability of a Transport: compacting a
// conversation with POST {base}/responses/compact, a unary JSON call that
// returns {"id","object":"response.compaction","created_at","output":[…],"usage":{…}}
// (https://platform.openai.com/docs/api-reference/responses/compact; the
// Codex backend serves the same path for the Codex CLI's remote compaction,
// codex-rs/codex-api CompactClient). Find it by type assertion; the openai
// (not openai_compat) and codex transports have it.
type Compactor interface {
	// Compact sends req.Body (a compaction request: model, input,
	// instructions, …) as it is, asking for JSON; Endpoint and Stream are
	// ignored. Errors and non-2xx answers are as for Transport.Do.
	Compact(ctx context.Context, req *Request) (*Response, error)
}

// compactURL is target (a …/responses URL) with /compact appended.
func compactURL(target *url.URL) *url.URL {
	return endpointURL(target, "compact")
}

// jsonAccept wraps a header setter so that the call asks for JSON.
type jsonAccept struct{ hs headerSetter }

func (j jsonAccept) setHeader(h http.Header, req *Request) {
	j.hs.setHeader(h, req)
	h["Accept"] = hvJSON
}

// Compact sends req to {base}/responses/compact with the account's key.
// openai_compat accounts do not speak Responses: ErrUnsupportedEndpoint.
func (t *openAI) Compact(ctx context.Context, req *Request) (*Response, error) {
	if t.respURL == nil {
		return nil, unsupported(t.provider, translate.Responses)
	}
	return compact(ctx, &t.base, compactURL(t.respURL), t, req)
}

// Compact sends req to {base}/responses/compact with the account's access
// token, ChatGPT-Account-ID and Codex's headers, the body unchanged (the
// backend's compaction call is not a stream and takes no store field).
func (t *codex) Compact(ctx context.Context, req *Request) (*Response, error) {
	return compact(ctx, &t.base, compactURL(t.url), t, req)
}

func compact(ctx context.Context, b *base, target *url.URL, hs headerSetter, req *Request) (*Response, error) {
	jr := *req
	jr.Stream = false
	resp, err := b.send(ctx, target, req.Body, false, jsonAccept{hs}, &jr)
	if err != nil {
		return nil, err
	}
	if err := checkShape(resp, false); err != nil {
		return nil, err
	}
	return response(resp), nil
}

// SupportsCompact reports whether provider p's transport implements Compactor.
func SupportsCompact(p storage.Provider) bool {
	return p == storage.ProviderOpenAI || p == storage.ProviderCodex
}
