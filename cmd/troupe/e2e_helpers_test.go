package main

// Shared helpers of the end-to-end tests: an in-process demo (mock fleet on
// 127.0.0.1:0, gateway on 127.0.0.1:0, data in t.TempDir()), raw HTTP
// helpers, OpenAI error-shape checks and bounded waits.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/troupe-gw/troupe/internal/poll"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/journal"
)

// syncBuffer is a goroutine-safe log sink; its content is printed when a test fails.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testConfig is the default configuration with no file and no environment,
// listening on a free loopback port, storing in a fresh temp dir.
func testConfig(t *testing.T) *Config {
	t.Helper()
	cfg, err := loadConfig("", func() []string { return nil })
	if err != nil {
		t.Fatalf("loadConfig defaults: %v", err)
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.Log.Level = "warn"
	return cfg
}

// putAccounts stores accounts in cfg's storage, opened and closed here
// (before the app under test starts on it), and returns them as stored (with
// their IDs). Any error fails the test.
func putAccounts(t *testing.T, cfg *Config, accounts ...storage.Account) []storage.Account {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := openStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stored := make([]storage.Account, 0, len(accounts))
	for _, a := range accounts {
		sa, err := s.PutAccount(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, sa)
	}
	return stored
}

// twoKindProvider is the provider of account number i in the tests' pools:
// odd numbers codex (serving gpt-5.5), even ones openai (serving
// gpt-4.1-mini). The tests tell the kind of the account that served an
// answer by the parity of its number; the demo itself has four kinds.
func twoKindProvider(i int) storage.Provider {
	if i%2 == 1 {
		return storage.ProviderCodex
	}
	return storage.ProviderOpenAI
}

// twoKindAccounts is demoAccounts with twoKindProvider's kinds.
func twoKindAccounts(n int, mockAddr string) ([]mock.Account, []storage.Account) {
	return tuned(span(1, n, 1), nil)(mockAddr)
}

// tuned returns demo accounts with the given numbers (odd: codex serving
// gpt-5.5, even: openai serving gpt-4.1-mini), each passed through tune.
func tuned(numbers []int, tune func(ma *mock.Account, sa *storage.Account)) accountsFunc {
	return func(mockAddr string) ([]mock.Account, []storage.Account) {
		var fa []mock.Account
		var pa []storage.Account
		for _, i := range numbers {
			ma, sa := demoAccountAs(i, twoKindProvider(i), mockAddr)
			if tune != nil {
				tune(&ma, &sa)
			}
			fa = append(fa, ma)
			pa = append(pa, sa)
		}
		return fa, pa
	}
}

// span returns the numbers from..to inclusive, stepping by step.
func span(from, to, step int) []int {
	var out []int
	for i := from; i <= to; i += step {
		out = append(out, i)
	}
	return out
}

// testDemo is a running demo with what the tests need to inspect it.
type testDemo struct {
	*demo
	base  string   // http://127.0.0.1:PORT/v1
	names []string // pool account names
	logs  *syncBuffer
}

// startTestDemo starts a demo over accounts with cfg (testConfig when nil),
// waits until every enabled pool account has published its view, and stops
// everything in t.Cleanup.
func startTestDemo(t *testing.T, cfg *Config, accounts accountsFunc) *testDemo {
	t.Helper()
	if cfg == nil {
		cfg = testConfig(t)
	}
	logs := &syncBuffer{}
	var names []string
	wrapped := func(addr string) ([]mock.Account, []storage.Account) {
		fa, pa := accounts(addr)
		for _, a := range pa {
			names = append(names, a.Name)
		}
		return fa, pa
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := startDemoWith(ctx, cfg, logs, wrapped)
	if err != nil {
		t.Fatalf("startDemo: %v", err)
	}
	td := &testDemo{demo: d, base: d.app.baseURL(), names: names, logs: logs}
	t.Cleanup(func() {
		done := make(chan error, 1)
		go func() { done <- d.close() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("demo close: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("demo close did not return within 30s")
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	waitHealthy(t, d.app)
	eventually(t, 10*time.Second, "every account published its view", func() (bool, string) {
		n := len(d.app.sys.Views())
		return n == len(names), fmt.Sprintf("%d of %d views", n, len(names))
	})
	return td
}

// serveTestApp serves a started app, stops it when t ends (logging what
// it logged if t failed), and waits until it answers and its pool holds n
// accounts. what names it in failures ("second instance").
func serveTestApp(t *testing.T, a *app, logs *syncBuffer, n int, what string) {
	t.Helper()
	a.serve()
	t.Cleanup(func() {
		if err := a.shutdown(10 * time.Second); err != nil {
			t.Errorf("%s shutdown: %v", what, err)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", what, logs.String())
		}
	})
	waitHealthy(t, a)
	eventually(t, 10*time.Second, what+"'s pool", func() (bool, string) {
		return len(a.sys.Views()) == n, fmt.Sprintf("%d of %d views", len(a.sys.Views()), n)
	})
}

// usageSettled waits until every client request a has begun has ended
// (troupe_inflight_requests is 0; a stream ends at its Close, just after
// the client read its last event) and flushes the usage recorder. Each
// request queues its one usage record as it ends, so once this returns the
// stored records are final: a count taken now is exact, and nothing more
// can arrive for the requests made so far.
func usageSettled(t testing.TB, a *app) {
	t.Helper()
	eventually(t, 30*time.Second, "every request ended", func() (bool, string) {
		n := inflightRequests(t, a)
		return n == 0, fmt.Sprintf("%v requests in flight", n)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.sys.FlushUsage(ctx); err != nil {
		t.Fatalf("FlushUsage: %v", err)
	}
}

// inflightRequests reads a's troupe_inflight_requests gauge.
func inflightRequests(t testing.TB, a *app) float64 {
	t.Helper()
	mfs, err := a.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "troupe_inflight_requests" && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no troupe_inflight_requests gauge")
	return 0
}

// eventually polls cond every 10 ms until it holds, failing the test after
// timeout with cond's last description of the state. Call it from the test
// goroutine only.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	poll.UntilState(t, timeout, what, cond)
}

// journalDrained waits, on the journal's own signal, until the usage
// journal j is written to storage and empty, failing the test after timeout.
func journalDrained(t testing.TB, j *journal.Usage, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := j.WaitDrained(ctx); err != nil {
		t.Fatalf("usage journal not written to storage: %v; %+v", err, j.Stats())
	}
}

// assertNoLeases waits until every account is idle both in the mock fleet
// and in the gateway's actor views.
func (d *testDemo) assertNoLeases(t *testing.T) {
	t.Helper()
	eventually(t, 10*time.Second, "every account idle (mock and gateway)", func() (bool, string) {
		var busy []string
		for _, n := range d.names {
			if st := d.fleet.Stats(n); st.InFlight != 0 {
				busy = append(busy, fmt.Sprintf("mock %s in-flight %d", n, st.InFlight))
			}
		}
		for _, v := range d.app.sys.Views() {
			if v.InFlight != 0 {
				busy = append(busy, fmt.Sprintf("gateway %s in-flight %d", v.Name, v.InFlight))
			}
		}
		sort.Strings(busy)
		return len(busy) == 0, strings.Join(busy, "; ")
	})
}

// viewInFlight returns the in-flight count of the named account in the gateway's views.
func (d *testDemo) viewInFlight(name string) (int, bool) {
	for _, v := range d.app.sys.Views() {
		if v.Name == name {
			return v.InFlight, true
		}
	}
	return 0, false
}

// httpClient is the raw client of the tests: no retries, bounded.
var httpClient = &http.Client{Timeout: 30 * time.Second}

// do sends one request to the gateway and returns the response with its body read.
func (d *testDemo) do(t *testing.T, method, path string, body io.Reader, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	u := strings.TrimSuffix(d.base, "/v1") + path
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp, b
}

// post sends a JSON body with the demo's key.
func (d *testDemo) post(t *testing.T, path, body string) (*http.Response, []byte) {
	t.Helper()
	return d.do(t, http.MethodPost, path, strings.NewReader(body), map[string]string{
		"Authorization": "Bearer " + d.apiKey,
		"Content-Type":  "application/json",
	})
}

// openAIError is a decoded OpenAI error body.
type openAIError struct {
	Message string
	Type    string
	Param   *string
	Code    *string
}

// parseOpenAIError checks that b is exactly OpenAI's error shape
// {"error":{"message":string,"type":string,"param":string|null,"code":string|null}}
// and decodes it.
func parseOpenAIError(b []byte) (openAIError, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return openAIError{}, fmt.Errorf("not a JSON object: %v", err)
	}
	if len(top) != 1 || top["error"] == nil {
		return openAIError{}, fmt.Errorf("want exactly one top-level key \"error\", got %d keys", len(top))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(top["error"], &fields); err != nil {
		return openAIError{}, fmt.Errorf("error is not an object: %v", err)
	}
	var e openAIError
	for _, k := range []string{"message", "type", "param", "code"} {
		raw, ok := fields[k]
		if !ok {
			return e, fmt.Errorf("error.%s missing", k)
		}
		var v *string
		if err := json.Unmarshal(raw, &v); err != nil {
			return e, fmt.Errorf("error.%s is neither a string nor null: %s", k, raw)
		}
		switch k {
		case "message", "type":
			if v == nil || *v == "" {
				return e, fmt.Errorf("error.%s must be a non-empty string, got %s", k, raw)
			}
			if k == "message" {
				e.Message = *v
			} else {
				e.Type = *v
			}
		case "param":
			e.Param = v
		case "code":
			e.Code = v
		}
	}
	return e, nil
}

// wantError checks an answer's status, content type and OpenAI error shape,
// type and code ("" code means null).
func wantError(t *testing.T, what string, resp *http.Response, body []byte, status int, typ, code string) openAIError {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("%s: status %d, want %d; body %.300s", what, resp.StatusCode, status, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q, want application/json", what, ct)
	}
	e, err := parseOpenAIError(body)
	if err != nil {
		t.Errorf("%s: body is not OpenAI's error shape: %v; body %.300s", what, err, body)
		return e
	}
	if e.Type != typ {
		t.Errorf("%s: error.type %q, want %q", what, e.Type, typ)
	}
	switch {
	case code == "" && e.Code != nil:
		t.Errorf("%s: error.code %q, want null", what, *e.Code)
	case code != "" && (e.Code == nil || *e.Code != code):
		t.Errorf("%s: error.code %v, want %q", what, strPtr(e.Code), code)
	}
	return e
}

func strPtr(p *string) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprintf("%q", *p)
}

// answerFrom matches the account name in a mock answer ("Hello from demo-0042. …").
var answerFrom = regexp.MustCompile(`^Hello from (demo-\d{4})\.`)

// checkAnswer checks that text is exactly the answer of one of the demo's
// accounts whose number has the given parity (1: codex, 0: openai) and
// returns that account's name.
func (d *testDemo) checkAnswer(t *testing.T, what, text string, tokens, parity int) string {
	t.Helper()
	m := answerFrom.FindStringSubmatch(text)
	if m == nil {
		t.Errorf("%s: answer %q does not name a demo account", what, text)
		return ""
	}
	name := m[1]
	known := false
	for _, n := range d.names {
		known = known || n == name
	}
	if !known {
		t.Errorf("%s: answer names %s, not an account of this demo", what, name)
	}
	var num int
	fmt.Sscanf(name, "demo-%d", &num)
	if num%2 != parity {
		t.Errorf("%s: served by %s, an account of the wrong kind", what, name)
	}
	if want := mock.AnswerText(name, tokens); text != want {
		t.Errorf("%s: answer\n%q, want\n%q", what, text, want)
	}
	return name
}
