package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"github.com/troupe-gw/troupe/internal/poll"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/storage/sqlite"
	"github.com/troupe-gw/troupe/upstream"
	"github.com/valyala/fasthttp"
)

const testAdminPassword = "correct horse battery staple"

// adminEnv is a served gateway with the admin API mounted, over a SQLite
// store in memory, with an admin user "admin" (testAdminPassword), an admin
// API key and a client key.
type adminEnv struct {
	t        testing.TB
	front    *gateway.Server
	srv      *Server
	sys      *actors.System
	store    storage.Store
	cache    *memcache.Cache
	base     string // http://127.0.0.1:port
	adminKey string
	key      string // a client key
	policies *routing.Runtime
}

// cannedTransport answers every request with the same status, content type and body.
type cannedTransport struct {
	status int
	ctype  string
	body   []byte
}

func (c cannedTransport) Do(_ context.Context, _ *upstream.Request) (*upstream.Response, error) {
	h := http.Header{}
	h.Set("Content-Type", c.ctype)
	return &upstream.Response{Status: c.status, Header: h, Body: io.NopCloser(bytes.NewReader(c.body))}, nil
}

// okChat is an upstream that answers every request with a Chat Completion.
var okChat = cannedTransport{200, "application/json", []byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)}

func newAdminEnv(t testing.TB, accounts int) *adminEnv {
	t.Helper()
	key := bytes.Repeat([]byte{7}, 32)
	sealer, err := storage.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := sqlite.Open(ctx, sqlite.MemoryPath, sealer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sys, err := actors.Start(actors.Config{Store: store, Transport: func(storage.Account) (upstream.Transport, error) { return okChat, nil },
		UsageBatch: 1, UsageInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sys.Stop(c)
	})
	for i := range accounts {
		a := storage.Account{Name: "acct-" + string(rune('a'+i)), Provider: storage.ProviderOpenAI, Models: []string{"m"},
			MaxConcurrency: 4, BaseURL: "http://127.0.0.1:1/v1", Credentials: storage.Credentials{APIKey: "sk-upstream-secret-" + string(rune('a'+i))}}
		stored, err := store.PutAccount(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		sys.PutAccount(stored)
	}
	waitFor(t, "accounts to start", func() bool { return len(sys.Views()) == accounts })
	cache := memcache.New(memcache.Options{Now: windowStartClock()})
	t.Cleanup(func() { cache.Close() })
	front := gateway.New(gateway.Config{MaxWait: 200 * time.Millisecond}, sys, store, cache, nil, nil)
	pol := routing.New(sys, routing.Options{Store: store, Cache: cache})
	front.SetRouting(pol)
	srv := New(Deps{Front: front, Pool: sys, Store: store, Cache: cache, Routing: pol, Stats: front.Stats(), Instance: "test-instance"})
	front.SetMount(srv)
	srv.SetUI(fstest.MapFS{
		"index.html":         {Data: []byte("<!doctype html><title>Troupe admin</title>")},
		"assets/app-123.js":  {Data: []byte("console.log(1)")},
		"assets/app-123.css": {Data: []byte("body{}")},
	})
	hash, err := HashPassword(testAdminPassword)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateAdminUser(ctx, storage.AdminUser{Username: "admin", PasswordHash: hash}); err != nil {
		t.Fatal(err)
	}
	e := &adminEnv{t: t, front: front, srv: srv, sys: sys, store: store, cache: cache, policies: pol}
	var k storage.APIKey
	e.adminKey, k, _ = gateway.NewKey("ops")
	k.Admin = true
	if _, err := store.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	e.key, k, _ = gateway.NewKey("client")
	if _, err := store.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go front.Serve(ln)
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		front.Shutdown(c)
	})
	e.base = "http://" + ln.Addr().String()
	return e
}

// waitFor polls ok until it holds, failing the test after 5 s.
func waitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	poll.Until(t, 30*time.Second, what, ok)
}

// client is an HTTP client of the admin API: a cookie jar (a browser
// session) or an API key, and the CSRF token it learned.
type client struct {
	e      *adminEnv
	hc     *http.Client
	bearer string
	csrf   string
	origin string // sent as Origin when set
	ctype  string // sent as Content-Type with a body; "": application/json
}

func (e *adminEnv) browser() *client {
	jar, _ := cookiejar.New(nil)
	return &client{e: e, hc: &http.Client{Jar: jar, Timeout: 60 * time.Second}}
}

func (e *adminEnv) withKey(key string) *client {
	return &client{e: e, hc: &http.Client{Timeout: 60 * time.Second}, bearer: key}
}

// response is a decoded answer.
type response struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

func (c *client) do(method, path string, body any) *response {
	c.e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			c.e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.e.base+path, rd)
	if err != nil {
		c.e.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", cmp.Or(c.ctype, "application/json"))
	}
	if c.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+c.bearer)
	}
	if c.csrf != "" {
		req.Header.Set(CSRFHeader, c.csrf)
	}
	if c.origin != "" {
		req.Header.Set("Origin", c.origin)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := &response{status: resp.StatusCode, header: resp.Header, body: b}
	if strings.HasPrefix(path, "/api/admin/") || strings.HasPrefix(path, "/api/console/") {
		if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
			c.e.t.Errorf("%s %s: Cache-Control %q, want no-store", method, path, cc)
		}
		if len(b) > 0 && b[0] == '{' {
			if err := json.Unmarshal(b, &r.json); err != nil {
				c.e.t.Fatalf("%s %s: %d, bad JSON: %s", method, path, resp.StatusCode, b)
			}
		}
	}
	return r
}

// want fails the test unless r has the status.
func (r *response) want(t testing.TB, status int) *response {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	return r
}

// errCode returns error.code of an error answer.
func (r *response) errCode() string {
	e, _ := r.json["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// errParam returns error.param of an error answer.
func (r *response) errParam() string {
	e, _ := r.json["error"].(map[string]any)
	p, _ := e["param"].(string)
	return p
}

// login logs a browser in as admin and keeps the CSRF token.
func (e *adminEnv) login() *client {
	e.t.Helper()
	c := e.browser()
	r := c.do("POST", "/api/admin/login", map[string]string{"username": "admin", "password": testAdminPassword}).want(e.t, 200)
	c.csrf = r.json["csrf_token"].(string)
	return c
}

// mounted returns the handler of a front (unserved) over sys and store with
// the admin API mounted, without a cache.
func mounted(sys *actors.System, store storage.Store) fasthttp.RequestHandler {
	front := gateway.New(gateway.Config{}, sys, store, nil, nil, nil)
	front.SetMount(New(Deps{Front: front, Pool: sys, Store: store}))
	return front.Handler()
}

// do runs one request through h on a bare RequestCtx and returns the response.
func do(h fasthttp.RequestHandler, method, path, key string, body []byte) *fasthttp.Response {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(path)
	if key != "" {
		ctx.Request.Header.Set("Authorization", "Bearer "+key)
	}
	if len(body) > 0 {
		ctx.Request.Header.SetContentType("application/json") // as clients label admin bodies (else 415)
	}
	ctx.Request.SetBody(body)
	h(&ctx)
	resp := &fasthttp.Response{}
	ctx.Response.CopyTo(resp)
	return resp
}

// isOpenAIError reports whether b is an error in OpenAI's shape.
func isOpenAIError(b []byte) bool {
	r := gjson.ParseBytes(b)
	return r.Get("error.message").Type == gjson.String && r.Get("error.type").Type == gjson.String &&
		r.Get("error.param").Exists() && r.Get("error.code").Exists()
}

// windowStartClock is a clock that runs at real speed from the start of an
// hour: the cache's fixed, epoch-aligned counter windows (the login limits'
// minute and 15 minutes) then start with the test environment, so a test's
// attempts cannot straddle a window boundary and see their count reset.
func windowStartClock() func() time.Time {
	start := time.Now()
	base := start.Truncate(time.Hour)
	return func() time.Time { return base.Add(time.Since(start)) }
}
