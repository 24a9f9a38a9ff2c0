package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"unsafe"

	"github.com/tidwall/gjson"
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
// 1009, or had no free connection) over HTTP. An answer on the WebSocket is
// a *wsSource (resp nil); every other answer, a refused upgrade included,
// is resp.
func (s *Server) send(ctx context.Context, c *call, lease *actors.Lease, up translate.Protocol, body []byte) (*upstream.Response, *wsSource, error) {
	req := &upstream.Request{Endpoint: up, Stream: c.stream, Body: body, Header: c.header}
	if up == c.endpoint {
		req.RawQuery = c.rawQuery // the client's own query means something only in its own protocol
	}
	if c.compact {
		resp, err := compact(ctx, lease, req)
		return resp, nil, err
	}
	if up == c.endpoint && s.useUpstreamWS(c, lease) {
		r, refused, err := s.sys.ResponseWS(ctx, lease, actors.WSRequest{
			Body: body, Continuation: continuation(c), PreviousResponseID: c.prevResp,
			Header: c.header, FirstFrameTimeout: s.cfg.FirstTokenTimeout,
		})
		switch {
		case err == nil:
			s.metrics.upstreamWS.WithLabelValues("websocket").Inc()
			if refused != nil {
				return refused, nil, nil
			}
			return nil, &wsSource{r: r, header: r.Header}, nil
		case errors.Is(err, upstream.ErrMessageTooBig):
			s.metrics.upstreamWS.WithLabelValues("fallback_1009").Inc()
			s.log.Info("upstream websocket refused the frame (1009); sending over HTTP", "request_id", c.id, "account", lease.Name)
		case errors.Is(err, actors.ErrWSUnavailable):
			s.metrics.upstreamWS.WithLabelValues("fallback_busy").Inc()
		default:
			return nil, nil, err
		}
	}
	resp, err := lease.Transport.Do(ctx, req)
	return resp, nil, err
}

// wsSource reads a Responses answer from an upstream WebSocket: each text
// frame is one event, named by its "type" (as the SSE stream names it). The
// answer ends at its terminal event (response.completed, .incomplete,
// .failed, error): Next returns io.EOF after it. Closing it releases the
// connection, back to its pool when the answer completed.
type wsSource struct {
	r         *actors.WSResponse
	header    http.Header // the upgrade response's headers
	ended     bool        // the terminal event was returned
	completed string      // the response id, when the terminal event completed it
}

// Next returns the next frame as an event; its Name points into its Data.
func (w *wsSource) Next() (translate.Event, error) {
	if w.ended {
		return translate.Event{}, io.EOF
	}
	f, err := w.r.Next()
	if err != nil {
		return translate.Event{}, err
	}
	typ := gjson.Get(b2s(f), "type").Str
	switch typ {
	case "response.completed", "response.incomplete":
		w.ended = true
		w.completed = gjson.GetBytes(f, "response.id").Str
	case "response.failed", "error":
		w.ended = true
	}
	return translate.Event{Name: unsafe.Slice(unsafe.StringData(typ), len(typ)), Data: f}, nil
}

// Ready reports whether Next returns without waiting for the upstream:
// after the terminal event, or with a frame already queued.
func (w *wsSource) Ready() bool { return w.ended || w.r.Ready() }

// Raw is nil: a frame is no SSE.
func (w *wsSource) Raw() []byte { return nil }

// Close releases the connection.
func (w *wsSource) Close() error {
	w.r.Release(w.completed)
	return nil
}
