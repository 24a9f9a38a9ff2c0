package actors

import (
	"context"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// Compact keeps the compaction capability (upstream.Compactor) of the codex
// transport a limitsTransport wraps, reporting the usage windows of its
// answer's headers like Do. A wrapped transport without it fails with
// upstream.ErrUnsupportedEndpoint (KindRequest), as a Compactor would.
func (t *limitsTransport) Compact(ctx context.Context, req *upstream.Request) (*upstream.Response, error) {
	c, ok := t.Transport.(upstream.Compactor)
	if !ok {
		return nil, &upstream.Error{Kind: upstream.KindRequest, Err: upstream.ErrUnsupportedEndpoint}
	}
	resp, err := c.Compact(ctx, req)
	if err != nil {
		return resp, err
	}
	now := time.Now()
	if l, ok := upstream.ParseRateLimitHeaders(resp.Header, now); ok {
		t.report(l, now, requestModel(req))
	}
	return resp, nil
}
