package upstream

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/troupe-gw/troupe/bench/codexmock"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

func TestCodexIdentityAgainstMock(t *testing.T) {
	m, err := codexmock.Start(codexmock.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ident := NewIdentity([]byte("secret"))
	transports := map[string]Transport{}
	for _, id := range []string{"acc-1", "acc-2"} {
		m.AddAccount(codexmock.Account{ID: id, Plan: "plus"})
		at, _ := m.IssueAccess(id, time.Hour)
		tr, err := New(storage.Account{ID: "troupe-" + id, Name: id, Provider: storage.ProviderCodex, BaseURL: m.BaseURL(),
			Credentials: storage.Credentials{AccessToken: at}}, Options{Identity: ident})
		if err != nil {
			t.Fatal(err)
		}
		transports[id] = tr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	send := func(id string, h http.Header, body string) {
		t.Helper()
		resp, err := transports[id].Do(ctx, &Request{Endpoint: translate.Responses, Stream: true, Body: []byte(body), Header: h})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Status != 200 {
			t.Fatalf("%s: %d %s", id, resp.Status, b)
		}
		if _, ok := ParseRateLimitHeaders(resp.Header, time.Now()); !ok {
			t.Fatalf("%s: no rate-limit headers", id)
		}
	}
	client := http.Header{}
	client.Set("Session-Id", "client-session")
	client.Set("X-Codex-Window-Id", "client-session:3")
	client.Set("X-Codex-Turn-Metadata", `{"session_id":"client-session","turn_id":"t1"}`)
	body := `{"model":"gpt-5.4","input":"hi","prompt_cache_key":"client-session"}`
	send("acc-1", client, body)
	send("acc-1", client, body)
	send("acc-2", client, body)
	send("acc-1", nil, `{"model":"gpt-5.4","input":[{"role":"user","content":"first"}]}`) // an SDK client: no session headers at all

	reqs := m.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests", len(reqs))
	}
	s1, s1b, s2 := reqs[0].Header.Get("Session-Id"), reqs[1].Header.Get("Session-Id"), reqs[2].Header.Get("Session-Id")
	if s1 == "client-session" || !uuidRE.MatchString(s1) || s1 != s1b || s1 == s2 {
		t.Fatalf("session ids: %q %q %q", s1, s1b, s2)
	}
	h := reqs[0].Header
	if h.Get("Thread-Id") != s1 || h.Get("X-Client-Request-Id") != s1 || h.Get("X-Codex-Window-Id") != s1+":3" {
		t.Fatalf("thread/request/window ids: %v", h)
	}
	meta := h.Get("X-Codex-Turn-Metadata")
	if gjson.Get(meta, "session_id").Str != s1 || gjson.Get(meta, "turn_id").Str != "t1" {
		t.Fatalf("turn metadata %s", meta)
	}
	k1, k2 := gjson.GetBytes(reqs[0].Body, "prompt_cache_key").Str, gjson.GetBytes(reqs[2].Body, "prompt_cache_key").Str
	if k1 == "client-session" || k1 == "" || k1 == k2 || k1 != gjson.GetBytes(reqs[1].Body, "prompt_cache_key").Str {
		t.Fatalf("prompt_cache_key %q %q", k1, k2)
	}
	i1 := gjson.GetBytes(reqs[0].Body, "client_metadata.x-codex-installation-id").Str
	i2 := gjson.GetBytes(reqs[2].Body, "client_metadata.x-codex-installation-id").Str
	if !uuidRE.MatchString(i1) || i1 == i2 || i1 != gjson.GetBytes(reqs[3].Body, "client_metadata.x-codex-installation-id").Str {
		t.Fatalf("installation ids %q %q", i1, i2)
	}
	if reqs[3].Header.Get("Session-Id") == "" || reqs[3].Header.Get("Session-Id") == s1 {
		t.Fatalf("SDK request session %q", reqs[3].Header.Get("Session-Id"))
	}
}

// BenchmarkCodexIdentity is the per-request cost of the account identity:
// the body's prompt_cache_key and installation id (sjson) and the session
// headers, on the fixture's Codex CLI body and headers.
func BenchmarkCodexIdentity(b *testing.B) {
	body := testdata(b, "codex-request-body.json")
	client := headersFromFixture(b, "codex-request-headers.http")
	id := NewIdentity([]byte("secret"))
	t := &codex{identity: id, identityKey: "acct-1", installation: id.Installation("acct-1")}
	req := &Request{Endpoint: translate.Responses, Stream: true, Body: body, Header: client}
	b.ReportAllocs()
	for b.Loop() {
		out, ids, err := t.applyIdentity(body, req)
		if err != nil || len(out) == 0 {
			b.Fatal(err)
		}
		h := make(http.Header, 16)
		setIdentityHeaders(h, client, ids)
	}
}

func TestCodexIdentityOnWebSocketFrames(t *testing.T) {
	id := NewIdentity([]byte("secret"))
	tr, err := New(storage.Account{ID: "a1", Name: "a1", Provider: storage.ProviderCodex, Credentials: storage.Credentials{AccessToken: "t"}}, Options{Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	f, err := tr.(WebSocketDialer).CreateFrame([]byte(`{"model":"gpt-5.4","input":"hi","prompt_cache_key":"thread-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if k := gjson.GetBytes(f, "prompt_cache_key").Str; k == "thread-1" || k != id.PromptCacheKey("a1", "k:thread-1") {
		t.Fatalf("frame prompt_cache_key %q", k)
	}
	if gjson.GetBytes(f, "client_metadata.x-codex-installation-id").Str != id.Installation("a1") || gjson.GetBytes(f, "type").Str != "response.create" {
		t.Fatalf("frame %s", f)
	}
}
