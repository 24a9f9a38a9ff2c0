package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// A previous_response_id is continued only by the API key it was served
// to: another key gets OpenAI's 400 previous_response_not_found and nothing
// goes upstream. Before, any key that knew the id was pinned to the owning
// account and continued the conversation, reading its state.
func TestPreviousResponseOfAnotherKey(t *testing.T) {
	answer := []byte(`{"id":"resp_owned","object":"response","status":"completed","output":[],"usage":{"input_tokens":1,"output_tokens":1}}`)
	rec := &recorder{inner: cannedTransport{200, "application/json", answer}, reqs: make(chan upstream.Request, 8)}
	s, sys, _, store := testServerStore(t, 2, rec)
	mc := memcache.New(memcache.Options{SweepInterval: -1})
	t.Cleanup(func() { mc.Close() })
	s.cache = mc
	newKey := func(name string) string {
		secret, k, err := NewKey(name)
		if err != nil {
			t.Fatal(err)
		}
		k.ID = "key-" + name // as the SQL stores assign
		if _, err := store.CreateAPIKey(context.Background(), k); err != nil {
			t.Fatal(err)
		}
		return secret
	}
	owner, other := newKey("owner"), newKey("other")
	// Served for real: the affinity lookup needs a request context that
	// can parent a timeout, which do()'s bare RequestCtx cannot.
	ln := serveTCP(t, s)
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(key string, body []byte) (int, []byte) {
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/responses", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if st, b := post(owner, []byte(`{"model":"m","input":"hi"}`)); st != 200 {
		t.Fatalf("first turn: %d %s", st, b)
	}
	<-rec.reqs
	cont := []byte(`{"model":"m","input":"more","previous_response_id":"resp_owned"}`)
	st, b := post(other, cont)
	if st != 400 || gjson.GetBytes(b, "error.code").Str != "previous_response_not_found" ||
		gjson.GetBytes(b, "error.param").Str != "previous_response_id" {
		t.Fatalf("other key: %d %s", st, b)
	}
	select {
	case r := <-rec.reqs:
		t.Fatalf("another key's continuation went upstream: %s", r.Body)
	default:
	}
	if st, b := post(owner, cont); st != 200 {
		t.Fatalf("owner's continuation: %d %s", st, b)
	}
	// A value recorded without a key (an older instance) still pins.
	if err := mc.Set(context.Background(), affinityPrefix+"resp_old", "a0", AffinityTTL); err != nil {
		t.Fatal(err)
	}
	c := &call{prevResp: "resp_old", key: &storage.APIKey{ID: "some-key"}}
	entry, aerr := s.admit(context.Background(), c.key, pinKey(c))
	if aerr == nil {
		aerr = s.pin(c, entry)
	}
	if aerr != nil || c.only != "a0" || c.prefer != "a0" {
		t.Fatalf("old value %q: %v, pinned to %q", entry, aerr, c.only)
	}
	waitIdle(t, sys)
}

// A continuation asking for a model its previous response's account does
// not serve gets 409 previous_response_not_found, so the client resends the
// full input without previous_response_id (docs/affinity.md, rule 1) and
// another account serves it. Before, it was a 503 no_account_available with
// Retry-After 60, which no retry could cure (found on troupe demo: a
// gpt-4.1-mini response continued with model claude-sonnet-4-5).
func TestPreviousResponseOtherModel(t *testing.T) {
	answer := []byte(`{"id":"resp_m","object":"response","status":"completed","output":[],"usage":{"input_tokens":1,"output_tokens":1}}`)
	rec := &recorder{inner: cannedTransport{200, "application/json", answer}, reqs: make(chan upstream.Request, 8)}
	s, sys, key, _ := testServerStore(t, 1, rec)
	sys.PutAccount(storage.Account{ID: "b0", Name: "other-model", Provider: storage.ProviderOpenAI, Models: []string{"m2"}, MaxConcurrency: 8})
	waitUntil(t, "the second account", func() bool { return len(sys.Views()) >= 2 })
	mc := memcache.New(memcache.Options{SweepInterval: -1})
	t.Cleanup(func() { mc.Close() })
	s.cache = mc
	ln := serveTCP(t, s)
	client := &http.Client{Timeout: 10 * time.Second}
	post := func(body string) (int, []byte) {
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/responses", bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if st, b := post(`{"model":"m","input":"hi"}`); st != 200 {
		t.Fatalf("first turn: %d %s", st, b)
	}
	<-rec.reqs
	st, b := post(`{"model":"m2","input":"more","previous_response_id":"resp_m"}`)
	if st != 409 || gjson.GetBytes(b, "error.code").Str != "previous_response_not_found" ||
		gjson.GetBytes(b, "error.param").Str != "previous_response_id" {
		t.Fatalf("continuation on another model: %d %s, want 409 previous_response_not_found", st, b)
	}
	if st, b := post(`{"model":"m2","input":"hi, more"}`); st != 200 {
		t.Fatalf("the full input without previous_response_id: %d %s", st, b)
	}
	waitIdle(t, sys)
}

// TestRoutingKeysMustBeStrings: previous_response_id and prompt_cache_key,
// which route a request, are refused 400 (naming the field) unless a
// string or null; a number was read as its text and routed on.
func TestRoutingKeysMustBeStrings(t *testing.T) {
	for _, tc := range []struct {
		ep    translate.Protocol
		body  string
		param string
	}{
		{translate.Responses, `{"model":"m","input":"hi","previous_response_id":123}`, "previous_response_id"},
		{translate.Responses, `{"model":"m","input":"hi","previous_response_id":{"id":"resp_1"}}`, "previous_response_id"},
		{translate.Responses, `{"model":"m","input":"hi","prompt_cache_key":7}`, "prompt_cache_key"},
		{translate.Chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"prompt_cache_key":true}`, "prompt_cache_key"},
	} {
		if _, aerr := parsed(t, tc.ep, tc.body); aerr == nil || aerr.Status != 400 || aerr.Param != tc.param {
			t.Errorf("%v %s: %+v, want 400 naming %s", tc.ep, tc.body, aerr, tc.param)
		}
	}
	c, aerr := parsed(t, translate.Responses, `{"model":"m","input":"hi","previous_response_id":null,"prompt_cache_key":"k"}`)
	if aerr != nil || c.prevResp != "" || c.cacheKey != "k" {
		t.Errorf("null and a string: %+v, prev %q key %q", aerr, c.prevResp, c.cacheKey)
	}
	c, aerr = parsed(t, translate.Responses, `{"model":"m","input":"hi","previous_response_id":"resp_1"}`)
	if aerr != nil || c.prevResp != "resp_1" {
		t.Errorf("a string: %+v, prev %q", aerr, c.prevResp)
	}
}
