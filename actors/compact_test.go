package actors

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

type fakeCompactor struct{ nopTransport }

func (fakeCompactor) Compact(context.Context, *upstream.Request) (*upstream.Response, error) {
	h := http.Header{}
	h.Set("X-Codex-Primary-Used-Percent", "12.5")
	h.Set("X-Codex-Primary-Window-Minutes", "300")
	return &upstream.Response{Status: 200, Header: h, Body: io.NopCloser(strings.NewReader(`{}`))}, nil
}

// The codex wrapper that reports usage windows keeps compaction.
func TestLimitsTransportCompacts(t *testing.T) {
	var reports int
	lt := &limitsTransport{Transport: fakeCompactor{}, report: func(upstream.RateLimits, time.Time, string) { reports++ }}
	var tr upstream.Transport = lt
	c, ok := tr.(upstream.Compactor)
	if !ok {
		t.Fatal("limitsTransport hides Compactor")
	}
	resp, err := c.Compact(context.Background(), &upstream.Request{})
	if err != nil || resp.Status != 200 || reports != 1 {
		t.Fatalf("compact: %v %v, %d reports", resp, err, reports)
	}
	lt.Transport = nopTransport{}
	if _, err := c.Compact(context.Background(), &upstream.Request{}); !errors.Is(err, upstream.ErrUnsupportedEndpoint) {
		t.Fatalf("without a compactor: %v", err)
	}
}
