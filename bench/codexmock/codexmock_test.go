package codexmock

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

var client = &http.Client{Timeout: 10 * time.Second}

func refresh(t *testing.T, s *Server, form bool, rt string) (int, map[string]any) {
	t.Helper()
	var req *http.Request
	if form {
		v := url.Values{"client_id": {ClientID}, "grant_type": {"refresh_token"}, "refresh_token": {rt}, "scope": {"openid profile email"}}
		req, _ = http.NewRequest("POST", s.TokenURL(), strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		b, _ := json.Marshal(map[string]string{"client_id": ClientID, "grant_type": "refresh_token", "refresh_token": rt})
		req, _ = http.NewRequest("POST", s.TokenURL(), strings.NewReader(string(b)))
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestRefreshTokensAreSingleUse(t *testing.T) {
	s, err := Start(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rt := s.AddAccount(Account{ID: "a1", Plan: "plus"})
	st, out := refresh(t, s, true, rt) // the legacy form-encoded grant
	if st != 200 || out["refresh_token"] == rt || out["access_token"] == nil {
		t.Fatalf("%d %v", st, out)
	}
	if st, out := refresh(t, s, false, rt); st != 401 || !strings.Contains(toJSON(out), "refresh_token_reused") {
		t.Fatalf("reuse: %d %v", st, out)
	}
	if st, _ := refresh(t, s, false, out["refresh_token"].(string)); st != 200 {
		t.Fatalf("rotated token: %d", st)
	}
	if st, out := refresh(t, s, false, "rt_unknown"); st != 401 || !strings.Contains(toJSON(out), "refresh_token_invalidated") {
		t.Fatalf("unknown: %d %v", st, out)
	}
	if g, r := s.Grants(); g != 2 || r != 2 {
		t.Fatalf("grants %d refused %d", g, r)
	}
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func respond(t *testing.T, s *Server, h http.Header, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.BaseURL()+"/responses", strings.NewReader(body))
	req.Header = h
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestResponsesEnforcesTheCodexClient(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	s, err := Start(Config{Now: clock, UsedPerRequest: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.AddAccount(Account{ID: "a1", Plan: "pro"})
	at, _ := s.IssueAccess("a1", time.Minute)
	good := func() http.Header {
		h := http.Header{}
		h.Set("Authorization", "Bearer "+at)
		h.Set("Chatgpt-Account-Id", "a1")
		h.Set("Originator", "codex_cli_rs")
		h.Set("User-Agent", "codex_cli_rs/0.169.0 (Ubuntu 24.04; x86_64) xterm")
		h.Set("Version", "0.169.0")
		h.Set("Accept", "text/event-stream")
		h.Set("Content-Type", "application/json")
		h.Set("Session-Id", "s")
		return h
	}
	body := `{"model":"gpt-5.4","stream":true,"store":false,"input":"hi"}`
	for _, tc := range []struct {
		name   string
		edit   func(h http.Header)
		body   string
		status int
		want   string
	}{
		{"ok", func(http.Header) {}, body, 200, "response.completed"},
		{"no originator", func(h http.Header) { h.Del("Originator") }, body, 400, "originator"},
		{"no session", func(h http.Header) { h.Del("Session-Id") }, body, 400, "session-id"},
		{"wrong account", func(h http.Header) { h.Set("Chatgpt-Account-Id", "a2") }, body, 401, "Unauthorized"},
		{"store true", func(http.Header) {}, `{"model":"gpt-5.4","stream":true,"store":true}`, 400, "Store must be set to false"},
		{"no stream", func(http.Header) {}, `{"model":"gpt-5.4","store":false}`, 400, "Stream must be set to true"},
		{"window used up", func(http.Header) {}, body, 429, "usage_limit_reached"},
	} {
		h := good()
		tc.edit(h)
		st, rh, b := respond(t, s, h, tc.body)
		if st != tc.status || !strings.Contains(b, tc.want) {
			t.Fatalf("%s: %d %s", tc.name, st, b)
		}
		if st == 200 || st == 429 {
			if rh.Get("X-Codex-Primary-Used-Percent") == "" || rh.Get("X-Codex-Primary-Window-Minutes") != "300" {
				t.Fatalf("%s: no rate-limit headers: %v", tc.name, rh)
			}
		}
		if tc.name == "ok" {
			s.SetUsed("a1", 100)
		}
	}
	s.ResetWindow("a1")
	now = now.Add(2 * time.Minute) // the access token has expired
	if st, _, b := respond(t, s, good(), body); st != 401 || !strings.Contains(b, "token_invalidated") {
		t.Fatalf("expired token: %d %s", st, b)
	}
}

// The mock refuses what the backend refuses and takes what the Codex CLI
// sends, service_tier ("priority" in its fast mode) included.
func TestRefusedParam(t *testing.T) {
	for body, want := range map[string]string{
		`{"model":"m","input":[],"stream":true,"store":false}`:                        "",
		`{"model":"m","service_tier":"priority","stream":true,"store":false}`:         "",
		`{"model":"m","service_tier":"flex","max_output_tokens":5,"temperature":0.1}`: "max_output_tokens",
		`{"model":"m","top_p":1}`: "top_p",
	} {
		if got := refusedParam([]byte(body)); got != want {
			t.Errorf("%s: refused %q, want %q", body, got, want)
		}
	}
}
