package upstream

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/translate"
)

// The classifier against real error bodies: testdata/errors holds copies of
// the shared wire fixtures (see its README). Expected classes follow the
// failure table of DESIGN.md and docs/architecture.md:
//
//	quota     429 usage_limit_reached (resets_in_seconds / resets_at), 402 quota, balance/quota wording
//	rate      429 without quota signals, with or without Retry-After
//	auth      401
//	banned    402 deactivated_workspace, 403
//	transient 5xx (and 529), timeouts, broken streams
//	request   400/404/413/422 caused by the request: returned to the client as is

// errorFixture reads testdata/errors/name.
func errorFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "errors", filepath.FromSlash(name)))
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return b
}

// parseHTTPHead parses a fixture .http file: a status line, header lines
// and, after a blank line, an optional body.
func parseHTTPHead(t *testing.T, b []byte) (int, http.Header, []byte) {
	t.Helper()
	head, body, _ := bytes.Cut(b, []byte("\n\n"))
	lines := strings.Split(strings.TrimRight(string(head), "\n"), "\n")
	f := strings.Fields(lines[0])
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		t.Fatalf("not a status line: %q", lines[0])
	}
	status, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("status %q: %v", f[1], err)
	}
	h := http.Header{}
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			t.Fatalf("header line %q", l)
		}
		h.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return status, h, body
}

func TestClassifyFixtures(t *testing.T) {
	// Status of the .json fixtures: the one their name says (and, for the
	// Anthropic ones, the one the protocol gives their error.type).
	cases := []struct {
		file   string // body fixture
		head   string // optional .http fixture giving status and headers
		status int    // when there is no head
		class  Class
		retry  time.Duration
	}{
		// OpenAI Chat Completions.
		{file: "openai-chat/error-400.json", status: 400, class: ClassRequest},
		{file: "openai-chat/error-401.json", status: 401, class: ClassAuth},
		{file: "openai-chat/error-404-model-not-found.json", status: 404, class: ClassRequest},
		{file: "openai-chat/error-429-insufficient-quota.json", status: 429, class: ClassQuota}, // no reset in the body: the actor's default applies
		// A plain rate limit: the body's "try again in 11.054s" is not read
		// from status answers (only from stream events); it would not matter:
		// the shortest rate backoff is 30 s.
		{file: "openai-chat/error-429-rate-limit.json", status: 429, class: ClassRate},
		{file: "openai-chat/error-429-rate-limit.json", head: "openai-chat/response-headers.429.http", class: ClassRate, retry: 12 * time.Second},
		{file: "openai-chat/error-500.json", status: 500, class: ClassTransient},
		{file: "openai-chat/error-500.json", status: 502, class: ClassTransient},
		{file: "openai-chat/error-500.json", status: 503, class: ClassTransient},

		// OpenAI Responses (same envelope).
		{file: "openai-responses/error-400.json", status: 400, class: ClassRequest},
		{file: "openai-responses/error-400-no-tool-call-found.json", status: 400, class: ClassRequest},
		{file: "openai-responses/error-400-previous-response-not-found.json", status: 400, class: ClassRequest},
		{file: "openai-responses/error-401.json", status: 401, class: ClassAuth},
		{file: "openai-responses/error-404-item-not-persisted.json", status: 404, class: ClassRequest},
		{file: "openai-responses/error-429-rate-limit.json", status: 429, class: ClassRate},
		{file: "openai-responses/error-500.json", status: 500, class: ClassTransient},

		// The Codex backend (FastAPI {"detail"} bodies and its own 429s).
		{file: "codex-backend/error-400-instructions.json", status: 400, class: ClassRequest},
		{file: "codex-backend/error-400-model-not-supported.json", status: 400, class: ClassRequest},
		{file: "codex-backend/error-400-store.json", status: 400, class: ClassRequest},
		{file: "codex-backend/error-400-stream.json", status: 400, class: ClassRequest},
		{file: "codex-backend/error-401-token-invalidated.json", status: 401, class: ClassAuth},
		{file: "codex-backend/error-401-unauthorized.json", status: 401, class: ClassAuth},
		{file: "codex-backend/error-429-usage-limit.json", status: 429, class: ClassQuota, retry: 513840 * time.Second},
		{file: "codex-backend/error-429-usage-limit.http", head: "codex-backend/error-429-usage-limit.http", class: ClassQuota, retry: 513840 * time.Second},
		{file: "codex-backend/error-429-usage-not-included.json", status: 429, class: ClassQuota},

		// Anthropic Messages (status by error.type, per the fixtures README).
		{file: "anthropic-messages/error-400.json", status: 400, class: ClassRequest},
		{file: "anthropic-messages/error-401.json", status: 401, class: ClassAuth},
		{file: "anthropic-messages/error-404.json", status: 404, class: ClassRequest},
		{file: "anthropic-messages/error-429.json", status: 429, class: ClassRate},
		{file: "anthropic-messages/error-429.json", head: "anthropic-messages/response-headers.429.http", class: ClassRate, retry: 17 * time.Second},
		{file: "anthropic-messages/error-500.json", status: 500, class: ClassTransient},
		{file: "anthropic-messages/error-529.json", status: 529, class: ClassTransient},
		{file: "anthropic-messages/error-400.json", status: 413, class: ClassRequest},
		{file: "anthropic-messages/error-401.json", status: 403, class: ClassBanned},
	}
	for _, c := range cases {
		name := c.file
		switch {
		case c.head == c.file:
		case c.head != "":
			name += "+" + filepath.Base(c.head)
		default:
			name += "/" + strconv.Itoa(c.status)
		}
		t.Run(name, func(t *testing.T) {
			body := errorFixture(t, c.file)
			status, h := c.status, http.Header(nil)
			if c.head != "" {
				var hb []byte
				status, h, hb = parseHTTPHead(t, errorFixture(t, c.head))
				if c.head == c.file {
					body = hb
				}
			}
			v := Classify(status, h, body)
			if v.Class != c.class || v.RetryAfter != c.retry {
				t.Errorf("Classify(%d, %v, %.80s…) = %v/%v, want %v/%v", status, h, body, v.Class, v.RetryAfter, c.class, c.retry)
			}
			if got := v.Class.AccountFault(); got != (c.class != ClassRequest) {
				t.Errorf("AccountFault() = %v for class %v", got, v.Class)
			}
		})
	}
}

// TestClassifyIssueShapes covers the failure shapes the issue and the mock
// fleet name that have no recorded fixture.
func TestClassifyIssueShapes(t *testing.T) {
	cases := []struct {
		name   string
		status int
		header http.Header
		body   string
		class  Class
		retry  time.Duration
	}{
		{"codex 402 deactivated_workspace", 402, nil, `{"detail":{"code":"deactivated_workspace"}}`, ClassBanned, 0},
		{"openai 403 account_deactivated", 403, nil, `{"error":{"message":"Your OpenAI account has been deactivated, please check your email for more information.","type":"invalid_request_error","param":null,"code":"account_deactivated"}}`, ClassBanned, 0},
		{"compat 429 balance wording", 429, nil, `{"error":{"message":"Your account has insufficient balance: current quota exceeded. Please recharge and try again.","type":"exceeded_current_quota_error"}}`, ClassQuota, 0},
		{"402 quota", 402, nil, `{"error":{"message":"Insufficient credits","type":"billing_error"}}`, ClassQuota, 0},
		{"429 Retry-After HTTP date", 429, http.Header{"Retry-After": {time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)}}, ``, ClassRate, -1},
		{"413", 413, nil, `{"error":{"message":"Request too large","type":"invalid_request_error","param":null,"code":null}}`, ClassRequest, 0},
		{"422", 422, nil, `{"detail":[{"loc":["body","input"],"msg":"field required","type":"value_error.missing"}]}`, ClassRequest, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Classify(c.status, c.header, []byte(c.body))
			if v.Class != c.class {
				t.Errorf("class %v, want %v", v.Class, c.class)
			}
			switch {
			case c.retry >= 0 && v.RetryAfter != c.retry:
				t.Errorf("RetryAfter %v, want %v", v.RetryAfter, c.retry)
			case c.retry < 0 && (v.RetryAfter < 85*time.Second || v.RetryAfter > 90*time.Second):
				t.Errorf("RetryAfter %v, want about 90s (from the HTTP date)", v.RetryAfter)
			}
		})
	}
}

// TestClassifyQuotaResetsAt: the issue (item 3) and the fixtures README
// (codex backend, note 17) say a usage_limit_reached body gives its reset as
// resets_in_seconds OR resets_at (unix seconds; preferred when in the
// future). A body with resets_at alone must cool the account until then, not
// for the 1 h default.
func TestClassifyQuotaResetsAt(t *testing.T) {
	at := time.Now().Add(3 * time.Hour).Unix()
	body := `{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":"plus","resets_at":` + strconv.FormatInt(at, 10) + `}}`
	v := Classify(429, nil, []byte(body))
	if v.Class != ClassQuota {
		t.Fatalf("class %v, want quota", v.Class)
	}
	want := time.Until(time.Unix(at, 0))
	if v.RetryAfter < want-5*time.Second || v.RetryAfter > want+time.Second {
		t.Errorf("RetryAfter %v, want about %v (until resets_at); the upstream's reset time is ignored", v.RetryAfter, want.Round(time.Second))
	}
}

// sseEvents reads every event of an SSE fixture.
func sseEvents(t testing.TB, b []byte) []translate.Event {
	t.Helper()
	sc := translate.NewScanner(bytes.NewReader(b), 0)
	var out []translate.Event
	for {
		ev, err := sc.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("scan: %v", err)
		}
		out = append(out, translate.Event{Name: bytes.Clone(ev.Name), Data: bytes.Clone(ev.Data)})
	}
}

func TestClassifyEventFixtures(t *testing.T) {
	type want struct {
		isErr bool
		class Class
		retry time.Duration
		msg   string // prefix of the message, when isErr
	}
	ok := want{}
	const quotaMsg = "You exceeded your current quota"
	cases := []struct {
		file string // under testdata/
		ep   translate.Protocol
		want []want // one per event
	}{
		{"responses-stream-error-event.sse", translate.Responses, []want{
			ok, ok, // created, in_progress
			{true, ClassQuota, 0, quotaMsg}, // event: error, nested error{type,code:insufficient_quota}
			{true, ClassQuota, 0, quotaMsg}, // response.failed, response.error.code insufficient_quota
		}},
		{"responses-stream-failed.sse", translate.Responses, []want{
			{true, ClassRate, 11054 * time.Millisecond, "Rate limit reached for gpt-5.1"},
		}},
		{"responses-stream-failed-context-length.sse", translate.Responses, []want{
			{true, ClassRequest, 0, "Your input exceeds the context window"},
		}},
		{"errors/openai-chat/stream-midstream-error.sse", translate.Chat, []want{
			ok, ok, // role chunk, "Hi"
			{true, ClassTransient, 0, "The server had an error"},
		}},
		// Anthropic: `event: error` (overloaded_error) after a first delta.
		{"errors/anthropic-messages/stream-error-overloaded.sse", translate.Messages, []want{
			ok, ok, ok, // message_start, content_block_start, "Hello"
			{true, ClassTransient, 0, "Overloaded"},
		}},
		{"messages-stream-text.sse", translate.Messages, nil},
		{"messages-stream-tooluse.sse", translate.Messages, nil},
		{"messages-stream-thinking.sse", translate.Messages, nil},
		// Negative controls: normal streams carry no error.
		{"chat-stream-text.sse", translate.Chat, nil},
		{"responses-stream-text.sse", translate.Responses, nil},
		{"responses-stream-incomplete.sse", translate.Responses, nil},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", filepath.FromSlash(c.file)))
			if err != nil {
				t.Fatal(err)
			}
			evs := sseEvents(t, b)
			if c.want != nil && len(evs) != len(c.want) {
				t.Fatalf("%d events, want %d", len(evs), len(c.want))
			}
			for i, ev := range evs {
				w := ok
				if c.want != nil {
					w = c.want[i]
				}
				v, msg, isErr := ClassifyEvent(c.ep, ev.Name, ev.Data)
				if isErr != w.isErr || v.Class != w.class || v.RetryAfter != w.retry {
					t.Errorf("event %d (%s): got isErr=%v %v/%v, want isErr=%v %v/%v", i, ev.Name, isErr, v.Class, v.RetryAfter, w.isErr, w.class, w.retry)
				}
				if w.isErr && !strings.HasPrefix(msg, w.msg) {
					t.Errorf("event %d (%s): message %q, want prefix %q", i, ev.Name, msg, w.msg)
				}
			}
		})
	}
}
