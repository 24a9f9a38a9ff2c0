package gateway

import (
	"context"
	"strings"
	"testing"

	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// BenchmarkAuthWarm measures API-key authentication with a warm cache: header
// parse, the secret's remembered digest (keyDigests) and the cache hit.
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

// headerThenHandle runs one request as the server does: headerReceived on
// its head, then the handler; between them, between runs before the body
// would arrive.
func headerThenHandle(s *Server, ctx *fasthttp.RequestCtx, between func()) *fasthttp.Response {
	s.headerReceived(&ctx.Request.Header)
	if between != nil {
		between()
	}
	s.handle(ctx)
	return writeOut(ctx)
}

// The handler authenticates with the lookup headerReceived made for the
// same secret (the secret is hashed once per request), and with nothing
// else: a lookup filed for another secret, or one an invalidation made
// stale while the body was arriving, is not used.
func TestKeyHintIsUsedOnlyForItsSecret(t *testing.T) {
	s, _, key, store := testServerStore(t, 1, cannedTransport{200, "application/json", []byte(`{"id":"x","choices":[]}`)})
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	newCtx := func(secret string) *fasthttp.RequestCtx {
		ctx := &fasthttp.RequestCtx{}
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/v1/chat/completions")
		ctx.Request.Header.Set("Authorization", "Bearer "+secret)
		ctx.Request.SetBody(body)
		return ctx
	}

	ctx := newCtx(key)
	s.headerReceived(&ctx.Request.Header)
	if ck := s.hints.take(&ctx.Request.Header, []byte(key)); ck == nil || !ck.found || ck.hash != storage.HashKey(key) {
		t.Fatalf("headerReceived filed %+v for a valid key", ck)
	}
	if ck := s.hints.take(&ctx.Request.Header, []byte(key)); ck != nil {
		t.Fatal("a hint was taken twice")
	}

	// A hint left behind by a request whose handler never ran is not the
	// next request's, even on the same RequestCtx.
	s.headerReceived(&ctx.Request.Header)
	other := KeyPrefix + "someone-else"
	ctx.Request.Header.Set("Authorization", "Bearer "+other)
	s.handle(ctx)
	if got := writeOut(ctx).StatusCode(); got != 401 {
		t.Fatalf("a hint filed for another secret authenticated the request: %d", got)
	}

	// The key is disabled while the body arrives: the handler refuses it.
	ctx = newCtx(key)
	if resp := headerThenHandle(s, ctx, nil); resp.StatusCode() != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
	}
	ctx = newCtx(key)
	resp := headerThenHandle(s, ctx, func() {
		for _, k := range store.keys {
			k.Disabled = true
			store.UpdateAPIKey(context.Background(), k)
		}
		s.InvalidateKeys()
	})
	if resp.StatusCode() != 401 {
		t.Fatalf("a key disabled between head and body was accepted: %d", resp.StatusCode())
	}
	// Its holder learns why (the code stays invalid_api_key).
	if body := string(resp.Body()); !strings.Contains(body, "is disabled") || !strings.Contains(body, `"invalid_api_key"`) {
		t.Errorf("a disabled key's 401 does not say so: %s", body)
	}
}

// A head without a key clears what an earlier request on the same
// RequestCtx left behind.
func TestKeyHintClearedByKeylessHead(t *testing.T) {
	s, _, key := testServer(t, 1, cannedTransport{})
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.Set("Authorization", "Bearer "+key)
	s.headerReceived(&ctx.Request.Header)
	ctx.Request.Header.Del("Authorization")
	s.headerReceived(&ctx.Request.Header)
	if ck := s.hints.take(&ctx.Request.Header, []byte(key)); ck != nil {
		t.Fatal("a keyless head left the previous request's hint in place")
	}
}
