package gateway

import (
	"context"
	"errors"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// UpstreamWebSocket values: when a Responses stream goes to its account over
// the upstream WebSocket mode rather than HTTP/SSE (docs/websocket.md).
const (
	// UpstreamWSAuto (the default): when the client itself is on the
	// Responses WebSocket and the account speaks it (codex, openai).
	UpstreamWSAuto = "auto"
	// UpstreamWSAlways: every streamed Responses request to an account that
	// speaks it, HTTP clients included.
	UpstreamWSAlways = "always"
	// UpstreamWSNever: always HTTP/SSE upstream.
	UpstreamWSNever = "never"
)

// useUpstreamWS decides whether c goes to lease's account over its
// upstream WebSocket.
func (s *Server) useUpstreamWS(c *call, lease *actors.Lease) bool {
	if c.endpoint != translate.Responses || !c.stream || !upstream.SupportsWebSocket(lease.Transport) {
		return false
	}
	switch s.cfg.WebSocket.Upstream {
	case UpstreamWSAlways:
		return true
	case UpstreamWSNever:
		return false
	}
	return c.ws
}

// send makes one upstream call for c on lease in protocol up (body is in
// up's protocol): the compaction call for /v1/responses/compact; over the
// account's upstream WebSocket when useUpstreamWS says so, else (and once
// more on the same lease when the WebSocket refused the frame with close
// 1009, or had no free connection) over HTTP.
func (s *Server) send(ctx context.Context, c *call, lease *actors.Lease, up translate.Protocol, body []byte) (*upstream.Response, error) {
	req := &upstream.Request{Endpoint: up, Stream: c.stream, Body: body, Header: c.header}
	if up == c.endpoint {
		req.RawQuery = c.rawQuery // the client's own query means something only in its own protocol
	}
	if c.compact {
		return compact(ctx, lease, req)
	}
	if up == c.endpoint && s.useUpstreamWS(c, lease) {
		resp, err := s.sys.ResponseWS(ctx, lease, actors.WSRequest{
			Body: body, Continuation: c.wsCont, PreviousResponseID: c.prevResp,
			Header: c.header, FirstContentTimeout: s.cfg.FirstTokenTimeout,
		})
		switch {
		case err == nil:
			s.metrics.upstreamWS.WithLabelValues("websocket").Inc()
			return resp, nil
		case errors.Is(err, upstream.ErrMessageTooBig):
			s.metrics.upstreamWS.WithLabelValues("fallback_1009").Inc()
			s.log.Info("upstream websocket refused the frame (1009); sending over HTTP", "request_id", c.id, "account", lease.Name)
		case errors.Is(err, actors.ErrWSUnavailable):
			s.metrics.upstreamWS.WithLabelValues("fallback_busy").Inc()
		default:
			return nil, err
		}
	}
	return lease.Transport.Do(ctx, req)
}
