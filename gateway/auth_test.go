package gateway

import (
	"testing"

	"github.com/valyala/fasthttp"
)

// BenchmarkAuthWarm measures API-key authentication with a warm cache: header
// parse, SHA-256 of the secret and the cache hit.
func BenchmarkAuthWarm(b *testing.B) {
	s, _, key := testServer(b, 1, cannedTransport{})
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.Set("Authorization", "Bearer "+key)
	if _, err := s.authenticate(&ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.authenticate(&ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAuthHeaders(t *testing.T) {
	s, _, key := testServer(t, 1, cannedTransport{})
	for _, h := range [][2]string{{"Authorization", "Bearer " + key}, {"Authorization", "bearer " + key}, {"x-api-key", key}} {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.Set(h[0], h[1])
		if _, err := s.authenticate(&ctx); err != nil {
			t.Errorf("%s: %v", h[0], err)
		}
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.Set("Authorization", "Bearer "+key+"x")
	if _, err := s.authenticate(&ctx); err == nil || err.Status != 401 {
		t.Errorf("wrong key accepted: %v", err)
	}
}
