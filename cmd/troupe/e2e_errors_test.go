package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/storage"
)

// Models of the error demo beyond the two demo models.
const (
	disabledModel = "gpt-disabled" // served only by a disabled account
	slowModel     = "gpt-slow"     // served only by one slow account that takes 1 request at a time
)

// errorsDemo runs demo-0001 (codex) and demo-0002 (openai) as usual,
// demo-0004 (openai, disabled) serving only disabledModel, and demo-0006
// (openai, MaxConcurrency 1, 2 tokens a second, 100 tokens: a 50 s answer)
// serving only slowModel, with a 200 ms gateway MaxWait.
func errorsDemo(t *testing.T) *testDemo {
	cfg := testConfig(t)
	cfg.Gateway.MaxWait = 200 * time.Millisecond
	return startTestDemo(t, cfg, tuned([]int{1, 2, 4, 6}, func(ma *mock.Account, sa *storage.Account) {
		switch ma.Name {
		case "demo-0004":
			ma.Models, sa.Models = []string{disabledModel}, []string{disabledModel}
			sa.Disabled = true
		case "demo-0006":
			ma.Models, sa.Models = []string{slowModel}, []string{slowModel}
			ma.Latency, ma.TokensPerSecond, ma.OutputTokens = 10*time.Millisecond, 2, 100
			sa.MaxConcurrency = 1
		}
	}))
}

// TestErrors checks every error the front answers by status and by OpenAI's
// error shape.
func TestErrors(t *testing.T) {
	d := errorsDemo(t)
	auth := "Bearer " + d.apiKey
	jsonHdr := func(extra ...string) map[string]string {
		h := map[string]string{"Authorization": auth, "Content-Type": "application/json"}
		for i := 0; i+1 < len(extra); i += 2 {
			h[extra[i]] = extra[i+1]
		}
		return h
	}
	chatBody := func(model string) string {
		return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}]}`, model)
	}

	cases := []struct {
		name         string
		method, path string
		header       map[string]string
		body         string
		status       int
		typ, code    string
		param        string // "" means null
	}{
		{name: "missing key", method: "POST", path: "/v1/chat/completions", header: map[string]string{"Content-Type": "application/json"},
			body: chatBody(demoOpenAIModel), status: 401, typ: "invalid_request_error", code: "missing_api_key"},
		{name: "bad key", method: "POST", path: "/v1/chat/completions", header: map[string]string{"Authorization": "Bearer sk-troupe-not-a-real-key", "Content-Type": "application/json"},
			body: chatBody(demoOpenAIModel), status: 401, typ: "invalid_request_error", code: "invalid_api_key"},
		{name: "foreign key", method: "POST", path: "/v1/responses", header: map[string]string{"Authorization": "Bearer sk-proj-abc", "Content-Type": "application/json"},
			body: `{"model":"gpt-5.5","input":"hi"}`, status: 401, typ: "invalid_request_error", code: "invalid_api_key"},
		{name: "bad key on models", method: "GET", path: "/v1/models", header: map[string]string{"Authorization": "Bearer sk-troupe-nope"},
			status: 401, typ: "invalid_request_error", code: "invalid_api_key"},
		{name: "malformed JSON", method: "POST", path: "/v1/chat/completions", header: jsonHdr(),
			body: `{"model":"gpt-4.1-mini","messages":[`, status: 400, typ: "invalid_request_error", code: "invalid_json"},
		{name: "missing model", method: "POST", path: "/v1/chat/completions", header: jsonHdr(),
			body: `{"messages":[{"role":"user","content":"hi"}]}`, status: 400, typ: "invalid_request_error", code: "missing_required_parameter", param: "model"},
		{name: "model of wrong type", method: "POST", path: "/v1/responses", header: jsonHdr(),
			body: `{"model":["gpt-5.5"],"input":"hi"}`, status: 400, typ: "invalid_request_error", code: "invalid_type", param: "model"},
		{name: "stream of wrong type", method: "POST", path: "/v1/chat/completions", header: jsonHdr(),
			body: `{"model":"gpt-4.1-mini","stream":"yes","messages":[{"role":"user","content":"hi"}]}`, status: 400, typ: "invalid_request_error", code: "invalid_type", param: "stream"},
		{name: "unknown route", method: "POST", path: "/v1/completions", header: jsonHdr(),
			body: chatBody(demoOpenAIModel), status: 404, typ: "invalid_request_error", code: "unknown_url"},
		{name: "unknown route GET", method: "GET", path: "/v2/nothing", header: jsonHdr(),
			status: 404, typ: "invalid_request_error", code: "unknown_url"},
		{name: "GET chat", method: "GET", path: "/v1/chat/completions", header: jsonHdr(),
			status: 405, typ: "invalid_request_error", code: "method_not_allowed"},
		{name: "DELETE responses", method: "DELETE", path: "/v1/responses", header: jsonHdr(),
			status: 405, typ: "invalid_request_error", code: "method_not_allowed"},
		{name: "POST models", method: "POST", path: "/v1/models", header: jsonHdr(),
			body: `{}`, status: 405, typ: "invalid_request_error", code: "method_not_allowed"},
		{name: "unknown model", method: "POST", path: "/v1/chat/completions", header: jsonHdr(),
			body: chatBody("gpt-nonexistent"), status: 404, typ: "invalid_request_error", code: "model_not_found", param: "model"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			resp, b := d.do(t, tc.method, tc.path, body, tc.header)
			e := wantError(t, tc.name, resp, b, tc.status, tc.typ, tc.code)
			if (tc.param == "") != (e.Param == nil) || (e.Param != nil && *e.Param != tc.param) {
				t.Errorf("error.param %s, want %q (\"\" = null)", strPtr(e.Param), tc.param)
			}
		})
	}

	t.Run("body over 16 MiB", func(t *testing.T) {
		status, hdr, b := postRaw(t, d, "/v1/chat/completions", 17<<20)
		wantError(t, "17 MiB body", &http.Response{StatusCode: status, Header: hdr}, b, 413, "invalid_request_error", "request_too_large")
	})

	t.Run("only account disabled", func(t *testing.T) {
		resp, b := d.post(t, "/v1/chat/completions", chatBody(disabledModel))
		wantError(t, "disabled", resp, b, 503, "server_error", "no_account_available")
		wantRetryAfter(t, resp)
		if st := d.fleet.Stats("demo-0004"); st.Requests != 0 {
			t.Errorf("the disabled account was called: %+v", st)
		}
	})

	t.Run("all busy past max wait", func(t *testing.T) {
		// Occupy the slow account's only slot with a stream…
		hold := openStream(t, d, "/v1/chat/completions", `{"model":"`+slowModel+`","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		eventually(t, 10*time.Second, "the slow account is busy", func() (bool, string) {
			st := d.fleet.Stats("demo-0006")
			return st.InFlight == 1, fmt.Sprintf("mock in-flight %d", st.InFlight)
		})
		// …then ask for it again: MaxWait is 200 ms, the slot frees after 50 s.
		start := time.Now()
		resp, b := d.post(t, "/v1/chat/completions", chatBody(slowModel))
		t.Logf("answered %d after %v", resp.StatusCode, time.Since(start).Round(time.Millisecond))
		wantError(t, "busy", resp, b, 503, "server_error", "no_account_available")
		wantRetryAfter(t, resp)
		hold.Close()
		if st := d.fleet.Stats("demo-0006"); st.Requests != 1 {
			t.Errorf("slow account got %d requests, want 1 (the waiting request must not reach it)", st.Requests)
		}
	})

	d.assertNoLeases(t)
}

// wantRetryAfter checks for a Retry-After header of whole seconds >= 1.
func wantRetryAfter(t *testing.T, resp *http.Response) {
	t.Helper()
	ra := resp.Header.Get("Retry-After")
	if n, err := strconv.Atoi(ra); err != nil || n < 1 {
		t.Errorf("Retry-After %q, want whole seconds >= 1", ra)
	}
}

// openStream starts a streaming request on its own connection and returns the
// connection once the response headers arrived; closing it disconnects.
func openStream(t *testing.T, d *testDemo, path, body string) net.Conn {
	t.Helper()
	conn, br := dialGateway(t, d)
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, d.app.addr(), d.apiKey, len(body), body)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("stream %s: %v", path, err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		t.Fatalf("stream %s: status %d: %s", path, resp.StatusCode, b)
	}
	return conn
}

// dialGateway opens a raw connection to the gateway, closed at cleanup, with
// a deadline so no read or write can hang the test.
func dialGateway(t *testing.T, d *testDemo) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", d.app.addr(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial gateway: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	return conn, bufio.NewReader(conn)
}

// postRaw posts a JSON-ish body of size bytes on a raw connection while
// reading the answer concurrently (the gateway may answer, and close, before
// the whole body is sent). It returns the status, headers and body.
func postRaw(t *testing.T, d *testDemo, path string, size int) (int, http.Header, []byte) {
	t.Helper()
	conn, br := dialGateway(t, d)
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		path, d.app.addr(), d.apiKey, size)
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatalf("write head: %v", err)
	}
	go func() {
		// {"model":"gpt-4.1-mini","pad":"xxxx…"} of exactly size bytes; write
		// errors are expected once the gateway has answered and closed.
		prefix := `{"model":"gpt-4.1-mini","pad":"`
		body := make([]byte, size)
		copy(body, prefix)
		for i := len(prefix); i < size-2; i++ {
			body[i] = 'x'
		}
		copy(body[size-2:], `"}`)
		_, _ = conn.Write(body)
	}()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && !bytes.HasSuffix(b, []byte("}\n")) {
		t.Fatalf("read answer body: %v (got %q)", err, b)
	}
	return resp.StatusCode, resp.Header, b
}

// TestGarbageInput throws malformed and hostile bodies at both endpoints:
// every answer must be a well-formed OpenAI error (or, for bodies that are
// valid requests, an answer), the process must survive, and no lease may leak.
func TestGarbageInput(t *testing.T) {
	d := errorsDemo(t)
	deepArray := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	deepObject := `{"model":"gpt-4.1-mini","messages":` + strings.Repeat(`{"a":`, 50000) + "1" + strings.Repeat("}", 50000) + "}"
	hugeModel := strings.Repeat("m", 1<<20)
	cases := []struct {
		name   string
		body   string
		status []int // acceptable statuses
	}{
		{"empty body", "", []int{400}},
		{"whitespace", " \n\t ", []int{400}},
		{"null", "null", []int{400}},
		{"array", "[]", []int{400}},
		{"string", `"gpt-4.1-mini"`, []int{400}},
		{"number", "42", []int{400}},
		{"model number", `{"model":123}`, []int{400}},
		{"model object", `{"model":{"id":"gpt-4.1-mini"}}`, []int{400}},
		{"model null", `{"model":null}`, []int{400}},
		{"model empty", `{"model":""}`, []int{400}},
		{"trailing garbage", `{"model":"gpt-4.1-mini"} x`, []int{400}},
		{"two objects", `{"model":"gpt-4.1-mini"}{"model":"gpt-4.1-mini"}`, []int{400}},
		{"unterminated string", `{"model":"gpt-4.1-mini`, []int{400}},
		{"deeply nested array", deepArray, []int{400}},
		{"deeply nested messages", deepObject, []int{200, 400}},
		{"invalid UTF-8 model", "{\"model\":\"gpt-\xff\xfe\"}", []int{400, 404}},
		{"invalid UTF-8 content", "{\"model\":\"gpt-4.1-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\x28\xff\"}]}", []int{200, 400}},
		{"NUL in model", "{\"model\":\"gpt-4.1-mini\\u0000\"}", []int{400, 404}},
		{"huge model string", `{"model":"` + hugeModel + `"}`, []int{400, 404}},
		{"duplicate model keys", `{"model":"gpt-nonexistent","model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`, []int{200, 400, 404}},
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/responses"} {
		for _, tc := range cases {
			t.Run(strings.TrimPrefix(path, "/v1/")+"/"+tc.name, func(t *testing.T) {
				resp, b := d.post(t, path, tc.body)
				ok := false
				for _, s := range tc.status {
					ok = ok || resp.StatusCode == s
				}
				if !ok {
					t.Errorf("status %d, want one of %v; body %.300s", resp.StatusCode, tc.status, b)
				}
				if resp.StatusCode >= 400 {
					if _, err := parseOpenAIError(b); err != nil {
						t.Errorf("status %d: not OpenAI's error shape: %v; body %.300s", resp.StatusCode, err, b)
					}
				}
				if len(b) > len(tc.body)+4<<10 {
					t.Errorf("answer is %d bytes for a %d-byte request", len(b), len(tc.body))
				}
			})
		}
	}
	// The gateway still answers normally, and nothing is held.
	resp, b := d.post(t, "/v1/chat/completions", `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("after the garbage: status %d: %s", resp.StatusCode, b)
	}
	d.assertNoLeases(t)
}

// childEnv names the child-process mode of TestDeepNesting.
const childEnv = "TROUPE_E2E_CHILD"

// TestDeepNesting sends a body within the 16 MiB limit made of millions of
// nested arrays. A recursive JSON validator overflows the goroutine stack on
// it, which is a fatal error no recover can catch: the whole process dies.
// So the requests run in a child process (this test binary re-executed), and
// the parent checks that the child survived.
func TestDeepNesting(t *testing.T) {
	if os.Getenv(childEnv) == "deep-nesting" {
		deepNestingChild(t)
		return
	}
	if testing.Short() {
		t.Skip("-short: skipping the 16 MiB deep-nesting child process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDeepNesting$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=deep-nesting")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("child did not finish within 90s; output tail:\n%s", tail(out, 40))
	}
	if err != nil {
		if bytes.Contains(out, []byte("fatal error: stack overflow")) {
			t.Fatalf("the gateway process CRASHED on a deeply nested body (child %v):\n%s", err, crashSummary(out))
		}
		t.Fatalf("child failed: %v; output:\n%s", err, tail(out, 60))
	}
	if !bytes.Contains(out, []byte("--- PASS: TestDeepNesting")) {
		t.Fatalf("child did not run the test; output:\n%s", tail(out, 40))
	}
}

// deepNestingChild is TestDeepNesting inside the child process.
func deepNestingChild(t *testing.T) {
	d := startTestDemo(t, nil, tuned([]int{1, 2}, nil))
	const limit = 16 << 20 // gateway.max_body_bytes default
	bodies := map[string]string{
		// 8 Mi levels of [ … ]: valid JSON, exactly 16 MiB.
		"nested arrays": strings.Repeat("[", limit/2) + strings.Repeat("]", limit/2),
		// an object whose "messages" nests 4 Mi levels of {"a": … }, unterminated.
		"unterminated nested objects": `{"model":"gpt-4.1-mini","messages":` + strings.Repeat(`{"a":`, (limit-64)/5),
	}
	for _, name := range []string{"nested arrays", "unterminated nested objects"} {
		body := bodies[name]
		resp, b := d.post(t, "/v1/chat/completions", body)
		t.Logf("%s (%d bytes): status %d", name, len(body), resp.StatusCode)
		wantError(t, name, resp, b, 400, "invalid_request_error", "invalid_json")
	}
	resp, b := d.post(t, "/v1/chat/completions", `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 {
		t.Errorf("after the deep bodies: status %d: %s", resp.StatusCode, b)
	}
	d.assertNoLeases(t)
}

// crashSummary keeps the fatal error and the function lines of the goroutine
// that died: its top frames and, after the elided middle, the troupe frames
// that called into the overflow.
func crashSummary(out []byte) []byte {
	var keep [][]byte
	top, inG := 0, false
	for _, l := range bytes.Split(out, []byte("\n")) {
		switch {
		case bytes.HasPrefix(l, []byte("runtime: goroutine stack")), bytes.HasPrefix(l, []byte("fatal error")):
			keep = append(keep, l)
		case !inG && bytes.HasPrefix(l, []byte("goroutine ")) && bytes.Contains(l, []byte("[running]")):
			inG = true
			keep = append(keep, l)
		case !inG || len(l) == 0 || l[0] == '\t':
		case bytes.HasPrefix(l, []byte("created by")):
			keep = append(keep, l)
			return bytes.Join(keep, []byte("\n"))
		case bytes.Contains(l, []byte("frames elided")), bytes.Contains(l, []byte("troupe-gw/troupe/")):
			keep = append(keep, l)
		case top < 4:
			keep = append(keep, l)
			top++
		}
	}
	return bytes.Join(keep, []byte("\n"))
}

// tail returns the last n lines of b.
func tail(b []byte, n int) []byte {
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return bytes.Join(lines, []byte("\n"))
}
