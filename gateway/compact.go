package gateway

import (
	"context"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

// compactResponses serves POST /v1/responses/compact
// (https://platform.openai.com/docs/api-reference/responses/compact): a
// unary JSON call compacting a conversation into
// {"id","object":"response.compaction","output":[…],"usage":{…}}. It is
// passed through, bytes unchanged, to an account whose provider serves
// compaction (openai, codex: upstream.Compactor), with the usual limits,
// failover and usage record (route "responses.compact"). A model served only
// by accounts that cannot compact gets a 400 compaction_unsupported; a
// stream is refused with 400 (the endpoint does not stream).
func (s *Server) compactResponses(ctx *fasthttp.RequestCtx) {
	s.proxyWith(ctx, translate.Responses, func(c *call) *APIError {
		if c.stream {
			return errBadParam("stream", "/v1/responses/compact does not stream: remove 'stream'.")
		}
		c.compact = true
		c.native = needsNative(c)
		return nil
	})
}

// compact makes the compaction call of one attempt on lease.
func compact(ctx context.Context, lease *actors.Lease, req *upstream.Request) (*upstream.Response, error) {
	cp, ok := lease.Transport.(upstream.Compactor)
	if !ok {
		return nil, &upstream.Error{Kind: upstream.KindRequest, Err: upstream.ErrUnsupportedEndpoint}
	}
	return cp.Compact(ctx, req)
}

// route is the usage record's route of c.
func (c *call) route() string {
	if c.compact {
		return "responses.compact"
	}
	return c.endpoint.Route()
}

// errNeedsNative is the answer to a request only native accounts can serve
// when the model's accounts all speak another protocol.
func errNeedsNative(c *call) *APIError {
	if c.compact {
		return &APIError{Status: 400, Type: "invalid_request_error", Code: "compaction_unsupported", Param: "model",
			Message: "No account serving `" + clip(c.model) + "` supports /v1/responses/compact (it needs an openai or codex account)."}
	}
	return &APIError{Status: 400, Type: "invalid_request_error", Code: "previous_response_not_found", Param: "previous_response_id",
		Message: "No account serving `" + clip(c.model) + "` speaks the Responses API, which previous_response_id needs: send the whole conversation instead."}
}
