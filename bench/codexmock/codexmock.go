// Package codexmock is a mock of the ChatGPT Codex backend and its OAuth
// server, strict where the real ones are: it checks the headers the Codex
// CLI sends, issues access tokens (JWTs) that expire, rotates single-use
// refresh tokens (a spent one is refused with refresh_token_reused), and
// answers every /responses call with the x-codex-* rate-limit headers,
// turning 429 usage_limit_reached when an account's window is used up.
//
// Shapes follow the captures in the team's fixtures/codex-backend
// (request-headers.http, oauth-refresh.*, response-headers.200.http,
// error-429-usage-limit.http, models.request.http). It serves
//
//	POST /oauth/token                      refresh grants (JSON or form body)
//	POST /backend-api/codex/responses      a short Responses SSE stream
//	GET  /backend-api/codex/models         the models list (client_version required)
//
// on 127.0.0.1 for tests and benchmarks; it is not a model.
package codexmock

import (
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ClientID is the OAuth client id the mock accepts (the Codex CLI's).
const ClientID = "app_EMoamEEZ73f0CkXaXp7hrann"

//go:embed testdata/models.response.json
var modelsJSON []byte

// Config configures a Server. Zero fields take the defaults.
type Config struct {
	// AccessTTL is how long an issued access token is valid: default 1 h.
	AccessTTL time.Duration
	// UsedPerRequest is the percentage of the primary window one request
	// uses: default 1.
	UsedPerRequest float64
	// WindowMinutes is the primary window's length: default 300 (5 h).
	WindowMinutes int
	// RefreshDelay delays every token grant (to widen races in tests).
	RefreshDelay time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Account is one ChatGPT login the mock knows.
type Account struct {
	ID    string // chatgpt_account_id
	Email string
	Plan  string // "plus", "pro", …
}

type account struct {
	Account
	used    float64   // primary window percent used
	resetAt time.Time // primary window end
	revoked bool
}

type accessInfo struct {
	accountID string
	exp       time.Time
}

// Request is what the mock recorded of one /responses call.
type Request struct {
	AccountID string
	Header    http.Header
	Body      []byte
}

// Server is a running mock. Its methods are safe for concurrent use.
type Server struct {
	cfg Config
	ln  net.Listener
	srv *http.Server

	mu        sync.Mutex
	accounts  map[string]*account
	refresh   map[string]string // live refresh token → account id
	spent     map[string]bool   // refresh tokens already used
	access    map[string]accessInfo
	grants    int
	refused   int
	requests  []Request
	modelHits int
}

// Start listens on 127.0.0.1 (a free port) and serves until Close.
func Start(cfg Config) (*Server, error) {
	if cfg.AccessTTL <= 0 {
		cfg.AccessTTL = time.Hour
	}
	if cfg.UsedPerRequest <= 0 {
		cfg.UsedPerRequest = 1
	}
	if cfg.WindowMinutes <= 0 {
		cfg.WindowMinutes = 300
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, ln: ln,
		accounts: map[string]*account{}, refresh: map[string]string{}, spent: map[string]bool{}, access: map[string]accessInfo{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /oauth/token", s.token)
	mux.HandleFunc("POST /backend-api/codex/responses", s.responses)
	mux.HandleFunc("GET /backend-api/codex/models", s.models)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln)
	return s, nil
}

// URL is the server's base, e.g. http://127.0.0.1:PORT.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// BaseURL is the codex base URL accounts use: URL()+"/backend-api/codex".
func (s *Server) BaseURL() string { return s.URL() + "/backend-api/codex" }

// TokenURL is the OAuth token endpoint: URL()+"/oauth/token".
func (s *Server) TokenURL() string { return s.URL() + "/oauth/token" }

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// AddAccount registers a login and returns its first refresh token.
func (s *Server) AddAccount(a Account) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accounts[a.ID] = &account{Account: a, resetAt: s.cfg.Now().Add(time.Duration(s.cfg.WindowMinutes) * time.Minute)}
	rt := "rt_" + randHex(16)
	s.refresh[rt] = a.ID
	return rt
}

// IssueAccess returns a valid access token and id token for the account,
// as a login would (for tests that start with fresh tokens).
func (s *Server) IssueAccess(accountID string, ttl time.Duration) (access, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issueLocked(s.accounts[accountID], ttl)
}

// SetUsed sets the account's primary window usage (percent).
func (s *Server) SetUsed(accountID string, used float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.accounts[accountID]; a != nil {
		a.used = used
	}
}

// ResetWindow starts a new primary window for the account (usage 0).
func (s *Server) ResetWindow(accountID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.accounts[accountID]; a != nil {
		a.used = 0
		a.resetAt = s.cfg.Now().Add(time.Duration(s.cfg.WindowMinutes) * time.Minute)
	}
}

// Revoke invalidates every token of the account (as a password change does).
func (s *Server) Revoke(accountID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a := s.accounts[accountID]; a != nil {
		a.revoked = true
	}
}

// Grants is how many refresh grants succeeded; Refused how many failed.
func (s *Server) Grants() (granted, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grants, s.refused
}

// Requests returns the /responses calls served so far (accepted or not).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// issueLocked makes a new access and id token pair for a.
func (s *Server) issueLocked(a *account, ttl time.Duration) (access, id string) {
	now := s.cfg.Now()
	exp := now.Add(ttl)
	claims := map[string]any{
		"iss": "https://auth.openai.com", "aud": []string{ClientID}, "sub": "auth0|" + a.ID,
		"exp": exp.Unix(), "iat": now.Unix(), "email": a.Email,
		"https://api.openai.com/auth": map[string]any{"chatgpt_account_id": a.ID, "chatgpt_plan_type": a.Plan, "chatgpt_user_id": "user-" + a.ID},
		"jti":                         randHex(8),
	}
	access = jwt(claims)
	id = jwt(claims)
	s.access[access] = accessInfo{accountID: a.ID, exp: exp}
	return access, id
}

func jwt(claims map[string]any) string {
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	p, _ := json.Marshal(claims)
	return h + "." + base64.RawURLEncoding.EncodeToString(p) + "." + randHex(16)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// token serves the refresh grant (fixture oauth-refresh.request.http, and
// the legacy form-encoded variant).
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	var clientID, grant, rt string
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		if err := r.ParseForm(); err != nil {
			writeJSON(w, 400, `{"error":"invalid_request"}`)
			return
		}
		clientID, grant, rt = r.PostForm.Get("client_id"), r.PostForm.Get("grant_type"), r.PostForm.Get("refresh_token")
	} else {
		var b struct {
			ClientID     string `json:"client_id"`
			GrantType    string `json:"grant_type"`
			RefreshToken string `json:"refresh_token"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&b); err != nil {
			writeJSON(w, 400, `{"error":"invalid_request"}`)
			return
		}
		clientID, grant, rt = b.ClientID, b.GrantType, b.RefreshToken
	}
	if s.cfg.RefreshDelay > 0 {
		time.Sleep(s.cfg.RefreshDelay)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fail := func(status int, body string) {
		s.refused++
		writeJSON(w, status, body)
	}
	switch {
	case clientID != ClientID:
		fail(401, `{"error":"invalid_client"}`)
		return
	case grant != "refresh_token":
		fail(400, `{"error":"unsupported_grant_type"}`)
		return
	case s.spent[rt]:
		fail(401, `{"error":{"code":"refresh_token_reused"}}`)
		return
	}
	id, ok := s.refresh[rt]
	a := s.accounts[id]
	if !ok || a == nil || a.revoked {
		fail(401, `{"error":{"code":"refresh_token_invalidated"}}`)
		return
	}
	delete(s.refresh, rt)
	s.spent[rt] = true
	next := "rt_" + randHex(16)
	s.refresh[next] = id
	access, idTok := s.issueLocked(a, s.cfg.AccessTTL)
	s.grants++
	b, _ := json.Marshal(map[string]any{
		"id_token": idTok, "access_token": access, "refresh_token": next,
		"token_type": "Bearer", "expires_in": int(s.cfg.AccessTTL / time.Second),
	})
	writeJSON(w, 200, string(b))
}

// authorize checks the bearer token and ChatGPT-Account-ID; it writes the
// 401 and returns nil when they do not hold.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) *account {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	info, known := s.access[tok]
	if !ok || !known {
		writeJSON(w, 401, `{"detail":"Unauthorized"}`)
		return nil
	}
	a := s.accounts[info.accountID]
	if a == nil || a.revoked || !s.cfg.Now().Before(info.exp) {
		writeJSON(w, 401, `{"error":{"message":"Your authentication token has been invalidated. Please try signing in again.","type":"invalid_request_error","code":"token_invalidated","param":null},"status":401}`)
		return nil
	}
	if r.Header.Get("Chatgpt-Account-Id") != a.ID {
		writeJSON(w, 401, `{"detail":"Unauthorized"}`)
		return nil
	}
	return a
}

// checkClient enforces the Codex CLI's identity headers (fixture
// request-headers.http); it returns a reason when one is missing.
func checkClient(h http.Header) string {
	orig := h.Get("Originator")
	switch {
	case orig == "":
		return "missing originator"
	case !strings.HasPrefix(h.Get("User-Agent"), orig+"/"):
		return "user-agent does not start with the originator"
	case h.Get("Version") == "":
		return "missing version"
	case !strings.Contains(h.Get("Accept"), "text/event-stream"):
		return "accept is not text/event-stream"
	case !strings.HasPrefix(h.Get("Content-Type"), "application/json"):
		return "content-type is not application/json"
	case h.Get("Session-Id") == "" && h.Get("Session_id") == "":
		return "missing session-id"
	}
	return ""
}

func (s *Server) setLimitHeaders(h http.Header, a *account) {
	now := s.cfg.Now()
	if !now.Before(a.resetAt) {
		a.used = 0
		a.resetAt = now.Add(time.Duration(s.cfg.WindowMinutes) * time.Minute)
	}
	after := int64(a.resetAt.Sub(now) / time.Second)
	h.Set("X-Codex-Active-Limit", "codex")
	h.Set("X-Codex-Plan-Type", a.Plan)
	h.Set("X-Codex-Primary-Used-Percent", strconv.FormatFloat(min(a.used, 100), 'f', -1, 64))
	h.Set("X-Codex-Primary-Window-Minutes", strconv.Itoa(s.cfg.WindowMinutes))
	h.Set("X-Codex-Primary-Reset-At", strconv.FormatInt(a.resetAt.Unix(), 10))
	h.Set("X-Codex-Primary-Reset-After-Seconds", strconv.FormatInt(after, 10))
	h.Set("X-Codex-Secondary-Used-Percent", "0")
	h.Set("X-Codex-Secondary-Window-Minutes", "0")
	h.Set("X-Codex-Secondary-Reset-At", "")
	h.Set("X-Codex-Secondary-Reset-After-Seconds", "0")
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		return
	}
	s.mu.Lock()
	a := s.authorize(w, r)
	if a == nil {
		s.mu.Unlock()
		return
	}
	s.requests = append(s.requests, Request{AccountID: a.ID, Header: r.Header.Clone(), Body: body})
	if reason := checkClient(r.Header); reason != "" {
		s.mu.Unlock()
		writeJSON(w, 400, `{"detail":"`+reason+`"}`)
		return
	}
	var req struct {
		Model  string `json:"model"`
		Stream *bool  `json:"stream"`
		Store  *bool  `json:"store"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.mu.Unlock()
		writeJSON(w, 400, `{"detail":"Invalid JSON"}`)
		return
	}
	if req.Stream == nil || !*req.Stream {
		s.mu.Unlock()
		writeJSON(w, 400, `{"detail":"Stream must be set to true"}`)
		return
	}
	if req.Store == nil || *req.Store {
		s.mu.Unlock()
		writeJSON(w, 400, `{"detail":"Store must be set to false"}`)
		return
	}
	if k := refusedParam(body); k != "" {
		s.mu.Unlock()
		b, _ := json.Marshal(map[string]string{"detail": "Unsupported parameter: " + k})
		writeJSON(w, 400, string(b))
		return
	}
	s.setLimitHeaders(w.Header(), a)
	if a.used >= 100 {
		resetIn := int64(a.resetAt.Sub(s.cfg.Now()) / time.Second)
		s.mu.Unlock()
		writeJSON(w, 429, fmt.Sprintf(`{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":%q,"resets_at":%d,"resets_in_seconds":%d}}`,
			a.Plan, a.resetAt.Unix(), resetIn))
		return
	}
	a.used += s.cfg.UsedPerRequest
	id := a.ID
	s.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Openai-Model", req.Model)
	w.WriteHeader(200)
	rid := "resp_" + randHex(8)
	text := "Hello from " + id
	model, _ := json.Marshal(req.Model)
	resp := func(status string, output string) string {
		return `{"id":"` + rid + `","object":"response","created_at":` + strconv.FormatInt(s.cfg.Now().Unix(), 10) +
			`,"status":"` + status + `","model":` + string(model) + `,"output":[` + output + `]` +
			`,"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":15}}`
	}
	msg := `{"id":"msg_` + rid[5:] + `","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"` + text + `"}]}`
	events := []string{
		`{"type":"response.created","sequence_number":0,"response":` + resp("in_progress", "") + `}`,
		`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"msg_` + rid[5:] + `","type":"message","status":"in_progress","role":"assistant","content":[]}}`,
		`{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_` + rid[5:] + `","output_index":0,"content_index":0,"delta":"` + text + `"}`,
		`{"type":"response.output_item.done","sequence_number":3,"output_index":0,"item":` + msg + `}`,
		`{"type":"response.completed","sequence_number":4,"response":` + resp("completed", msg) + `}`,
	}
	for _, e := range events {
		var t struct {
			Type string `json:"type"`
		}
		json.Unmarshal([]byte(e), &t)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", t.Type, e)
	}
}

// models serves GET /models?client_version=… (fixture models.request.http):
// the captured list, filtered to the models whose available_in_plans holds
// the account's plan, with an ETag per plan (If-None-Match → 304).
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	a := s.authorize(w, r)
	if a != nil {
		s.modelHits++
	}
	s.mu.Unlock()
	if a == nil {
		return
	}
	etag := `"models-` + a.Plan + `"`
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if r.URL.Query().Get("client_version") == "" {
		writeJSON(w, 400, `{"detail":"client_version is required"}`)
		return
	}
	var doc struct {
		Models []map[string]any `json:"models"`
	}
	if err := json.Unmarshal(modelsJSON, &doc); err != nil {
		writeJSON(w, 500, `{"detail":"bad models fixture"}`)
		return
	}
	var keep []map[string]any
	for _, m := range doc.Models {
		plans, _ := m["available_in_plans"].([]any)
		for _, p := range plans {
			if p == a.Plan {
				keep = append(keep, m)
				break
			}
		}
	}
	if keep == nil {
		keep = []map[string]any{}
	}
	b, _ := json.Marshal(map[string]any{"models": keep})
	w.Header().Set("ETag", etag)
	writeJSON(w, 200, string(b))
}

// refusedParam returns the first top-level member of body the Codex backend
// refuses ("Unsupported parameter: max_output_tokens"): any member the
// Codex CLI does not send itself (fixtures clients/codex-cli, 0.169.0, and
// service_tier, which its fast mode sends: codex-rs ResponsesApiRequest);
// "" when there is none.
func refusedParam(body []byte) string {
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil {
		return ""
	}
	keys := make([]string, 0, len(members))
	for k := range members {
		switch k {
		case "model", "instructions", "input", "tools", "tool_choice", "parallel_tool_calls", "reasoning", "store",
			"stream", "include", "prompt_cache_key", "text", "client_metadata", "previous_response_id", "service_tier":
		default:
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	slices.Sort(keys)
	return keys[0]
}
