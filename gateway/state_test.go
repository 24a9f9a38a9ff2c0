package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/upstream"
)

// upstreamCall is one request an account of a stateServer received.
type upstreamCall struct {
	account string
	body    []byte
}

// stateServer is a gateway over accounts a0, a1, … of the given providers,
// each answering with answer(call index, account, request), and records
// every upstream call in order. It serves on 127.0.0.1 (affinity needs a
// real request context) with a memory cache.
type stateServer struct {
	s     *Server
	sys   *actors.System
	key   string
	url   string
	mu    sync.Mutex
	calls []upstreamCall
}

func newStateServer(t *testing.T, providers []storage.Provider, answer func(n int, account string, req *upstream.Request) *upstream.Response) *stateServer {
	t.Helper()
	ss := &stateServer{}
	store := newMemStore()
	sys := startSystem(t, actors.Config{Store: store, Transport: func(a storage.Account) (upstream.Transport, error) {
		return transportFunc(func(_ context.Context, req *upstream.Request) (*upstream.Response, error) {
			ss.mu.Lock()
			n := len(ss.calls)
			ss.calls = append(ss.calls, upstreamCall{account: a.ID, body: bytes.Clone(req.Body)})
			ss.mu.Unlock()
			return answer(n, a.ID, req), nil
		}), nil
	}})
	for i, p := range providers {
		sys.PutAccount(storage.Account{ID: "a" + string(rune('0'+i)), Name: "acct-" + string(rune('0'+i)),
			Provider: p, Models: []string{"m"}, MaxConcurrency: 1 << 20})
	}
	waitUntil(t, "the accounts started", func() bool { return len(sys.Views()) >= len(providers) })
	secret, k, err := NewKey("test")
	if err != nil {
		t.Fatal(err)
	}
	store.CreateAPIKey(context.Background(), k)
	ss.s = New(Config{MaxWait: 100 * time.Millisecond, MaxAttempts: 3}, sys, store, nil, nil, nil)
	mc := memcache.New(memcache.Options{SweepInterval: -1})
	t.Cleanup(func() { mc.Close() })
	ss.s.cache = mc
	ss.sys, ss.key = sys, secret
	ss.url = "http://" + serveTCP(t, ss.s).Addr().String()
	return ss
}

type transportFunc func(context.Context, *upstream.Request) (*upstream.Response, error)

func (f transportFunc) Do(ctx context.Context, r *upstream.Request) (*upstream.Response, error) {
	return f(ctx, r)
}

func (ss *stateServer) post(t *testing.T, path string, hdr map[string]string, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", ss.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+ss.key)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (ss *stateServer) recorded() []upstreamCall {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return append([]upstreamCall(nil), ss.calls...)
}

func jsonResp(status int, body string) *upstream.Response {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return &upstream.Response{Status: status, Header: h, Body: io.NopCloser(strings.NewReader(body))}
}

const (
	respOK = `{"id":"resp_ok","object":"response","status":"completed","output":[{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"ok"}]}],"usage":{"input_tokens":3,"output_tokens":1}}`
	msgOK  = `{"id":"msg_ok","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":1}}`
	// invalidEncrypted is OpenAI's answer to reasoning another account encrypted.
	invalidEncrypted = `{"error":{"message":"The encrypted content for item rs_1 could not be verified.","type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}`
	// bound is a Codex-shaped history carrying another turn's reasoning.
	bound = `{"model":"m","store":false,"include":["reasoning.encrypted_content"],"input":[` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"list files"}]},` +
		`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAA-owned-by-a0"},` +
		`{"type":"function_call","call_id":"call_1","name":"shell","arguments":"{\"cmd\":\"ls\"}"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"a.txt"}]}`
)

// itemTypes lists a Responses body's input item types, in order.
func itemTypes(body []byte) string {
	var out []string
	gjson.GetBytes(body, "input").ForEach(func(_, v gjson.Result) bool {
		out = append(out, v.Get("type").Str)
		return true
	})
	return strings.Join(out, ",")
}

// Account-bound state never follows a failover (issue #15, defect 3): the
// attempt on the next account goes without the reasoning item another
// account encrypted, every other item in order. With no owner known, the
// first attempt sends the body as it came.
func TestFailoverLeavesAccountStateBehind(t *testing.T) {
	ss := newStateServer(t, []storage.Provider{storage.ProviderOpenAI, storage.ProviderOpenAI},
		func(n int, _ string, _ *upstream.Request) *upstream.Response {
			if n == 0 {
				return jsonResp(500, `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`)
			}
			return jsonResp(200, respOK)
		})
	if st, b := ss.post(t, "/v1/responses", nil, bound); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	calls := ss.recorded()
	if len(calls) != 2 || calls[0].account == calls[1].account {
		t.Fatalf("calls %+v", calls)
	}
	if got := itemTypes(calls[0].body); got != "message,reasoning,function_call,function_call_output" {
		t.Errorf("first attempt (owner unknown) items %s: the body should go as it came", got)
	}
	if got := itemTypes(calls[1].body); got != "message,function_call,function_call_output" || bytes.Contains(calls[1].body, []byte("gAAAA")) {
		t.Errorf("failover items %s: %s", got, calls[1].body)
	}
}

// When the session's account is known, the state goes only to it: a request
// routed to another account (the owner left the pool) goes without it at
// once, while the owner gets it whole.
func TestAccountStateGoesOnlyToItsOwner(t *testing.T) {
	ss := newStateServer(t, []storage.Provider{storage.ProviderOpenAI, storage.ProviderOpenAI},
		func(int, string, *upstream.Request) *upstream.Response { return jsonResp(200, respOK) })
	ctx := context.Background()
	for i, tc := range []struct {
		owner string
		whole bool
	}{{"a1", true}, {"gone", false}} {
		session := "sess-" + tc.owner
		if err := ss.s.cache.Set(ctx, sessionCacheKey(session), tc.owner, time.Hour); err != nil {
			t.Fatal(err)
		}
		if st, b := ss.post(t, "/v1/responses", map[string]string{"Session-Id": session}, bound); st != 200 {
			t.Fatalf("%d %s", st, b)
		}
		c := ss.recorded()[i]
		hasState := bytes.Contains(c.body, []byte("gAAAA-owned-by-a0"))
		if tc.whole && (c.account != tc.owner || !hasState) {
			t.Errorf("owner %s: served by %s, state sent %v; want the owner, with its state", tc.owner, c.account, hasState)
		}
		if !tc.whole && hasState {
			t.Errorf("owner %s: %s got another account's state: %s", tc.owner, c.account, c.body)
		}
	}
}

// An upstream's invalid_encrypted_content is answered by exactly one retry
// without the state, on the same account, and never reaches the client;
// the account is not charged a failure.
func TestInvalidEncryptedContentRetriesOnceWithoutState(t *testing.T) {
	for _, stream := range []bool{false, true} {
		ss := newStateServer(t, []storage.Provider{storage.ProviderOpenAI},
			func(n int, _ string, req *upstream.Request) *upstream.Response {
				if bytes.Contains(req.Body, []byte("gAAAA")) {
					return jsonResp(400, invalidEncrypted)
				}
				if stream {
					h := http.Header{}
					h.Set("Content-Type", "text/event-stream")
					return &upstream.Response{Status: 200, Header: h, Body: io.NopCloser(bytes.NewReader(readFile(t, "responses-stream-text.sse")))}
				}
				return jsonResp(200, respOK)
			})
		body := bound
		if stream {
			body = strings.Replace(bound, `"store":false`, `"store":false,"stream":true`, 1)
		}
		st, b := ss.post(t, "/v1/responses", nil, body)
		if st != 200 || bytes.Contains(b, []byte("invalid_encrypted_content")) {
			t.Fatalf("stream %v: %d %s", stream, st, b)
		}
		calls := ss.recorded()
		if len(calls) != 2 || calls[0].account != calls[1].account || itemTypes(calls[1].body) != "message,function_call,function_call_output" {
			t.Fatalf("stream %v: calls %d: %+v", stream, len(calls), calls)
		}
		waitIdle(t, ss.sys)
		if v, _ := ss.sys.View("a0"); v.Failures != 0 || v.Successes != 1 {
			t.Errorf("stream %v: account failures %d successes %d", stream, v.Failures, v.Successes)
		}
	}
}

// A Messages client's history on Anthropic accounts: the thinking blocks
// (native signatures, redacted thinking) of another account are left out
// on failover, and thinking is turned off when the last assistant turn
// lost its block, as Anthropic requires.
func TestFailoverLeavesThinkingBehind(t *testing.T) {
	ss := newStateServer(t, []storage.Provider{storage.ProviderAnthropic, storage.ProviderAnthropic},
		func(n int, _ string, _ *upstream.Request) *upstream.Response {
			if n == 0 {
				return jsonResp(529, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			}
			return jsonResp(200, msgOK)
		})
	body := `{"model":"m","max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[` +
		`{"role":"user","content":"list files"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"ls","signature":"EqQBCkYIBxgCKkDnative"},{"type":"redacted_thinking","data":"EmwKAhgB"},` +
		`{"type":"tool_use","id":"toolu_1","name":"shell","input":{"cmd":"ls"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.txt"}]}]}`
	if st, b := ss.post(t, "/v1/messages", nil, body); st != 200 {
		t.Fatalf("%d %s", st, b)
	}
	calls := ss.recorded()
	if len(calls) != 2 {
		t.Fatalf("%d calls", len(calls))
	}
	second := calls[1].body
	if bytes.Contains(second, []byte(`"thinking"`)) || bytes.Contains(second, []byte("redacted_thinking")) ||
		gjson.GetBytes(second, "messages.#").Int() != 3 || gjson.GetBytes(second, "messages.1.content.0.type").Str != "tool_use" {
		t.Errorf("failover body %s", second)
	}
	if !bytes.Contains(calls[0].body, []byte("EqQBCkYIBxgCKkDnative")) {
		t.Errorf("first attempt lost its state: %s", calls[0].body)
	}
}
