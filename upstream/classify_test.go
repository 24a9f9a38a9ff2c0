package upstream

import (
	"net/http"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/translate"
)

// Bodies below are the shapes in testdata/ (see its README for sources).
func TestClassify(t *testing.T) {
	cases := []struct {
		name   string
		status int
		header http.Header
		body   string
		class  Class
		retry  time.Duration
	}{
		{"codex usage limit", 429, nil, `{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","plan_type":"pro","resets_at":1790426679,"resets_in_seconds":155800}}`, ClassQuota, 155800 * time.Second},
		{"codex usage not included", 429, nil, `{"error":{"type":"usage_not_included"}}`, ClassQuota, 0},
		{"openai insufficient quota", 429, nil, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, ClassQuota, 0},
		{"openai rate limit with Retry-After", 429, http.Header{"Retry-After": {"7"}}, `{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`, ClassRate, 7 * time.Second},
		{"rate limit without body", 429, nil, ``, ClassRate, 0},
		{"401", 401, nil, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`, ClassAuth, 0},
		{"codex deactivated", 402, nil, `{"detail":{"code":"deactivated_workspace"}}`, ClassBanned, 0},
		{"402 payment", 402, nil, `{"error":{"message":"insufficient balance"}}`, ClassQuota, 0},
		{"403", 403, nil, `{"error":{"message":"account disabled"}}`, ClassBanned, 0},
		{"500", 500, nil, `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`, ClassTransient, 0},
		{"503", 503, nil, ``, ClassTransient, 0},
		{"400", 400, nil, `{"error":{"message":"Unsupported parameter: 'max_tokens'","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}`, ClassRequest, 0},
		{"codex 400 store", 400, nil, `{"detail":"Store must be set to false"}`, ClassRequest, 0},
		{"404 model", 404, nil, `{"error":{"code":"model_not_found"}}`, ClassRequest, 0},
		{"413", 413, nil, ``, ClassRequest, 0},
		{"408", 408, nil, ``, ClassTransient, 0},
	}
	for _, c := range cases {
		v := Classify(c.status, c.header, []byte(c.body))
		if v.Class != c.class || v.RetryAfter != c.retry {
			t.Errorf("%s: got %v/%v, want %v/%v", c.name, v.Class, v.RetryAfter, c.class, c.retry)
		}
	}
}

func TestClassifyEvent(t *testing.T) {
	cases := []struct {
		ep         translate.Protocol
		name, data string
		isErr      bool
		class      Class
		retry      time.Duration
	}{
		{translate.Responses, "error", `{"type":"error","sequence_number":2,"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"You exceeded your current quota","param":null}}`, true, ClassQuota, 0},
		{translate.Responses, "response.failed", `{"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"rate_limit_exceeded","message":"Rate limit reached for gpt-5.1. Please try again in 11.054s. Visit https://platform.openai.com"}}}`, true, ClassRate, 11054 * time.Millisecond},
		{translate.Responses, "response.failed", `{"type":"response.failed","response":{"error":{"code":"context_length_exceeded","message":"too long"}}}`, true, ClassRequest, 0},
		{translate.Responses, "response.output_text.delta", `{"delta":"error"}`, false, ClassNone, 0},
		{translate.Chat, "", `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`, true, ClassTransient, 0},
		{translate.Chat, "", `{"choices":[{"delta":{"content":"an \"error\" word"}}]}`, false, ClassNone, 0},
	}
	for _, c := range cases {
		v, _, isErr := ClassifyEvent(c.ep, []byte(c.name), []byte(c.data))
		if isErr != c.isErr || v.Class != c.class || v.RetryAfter != c.retry {
			t.Errorf("%s %s: got %v %v/%v", c.ep, c.name, isErr, v.Class, v.RetryAfter)
		}
	}
}

func TestClassifyBody(t *testing.T) {
	cases := []struct {
		ep    translate.Protocol
		body  string
		isErr bool
		class Class
	}{
		{translate.Chat, `{"id":"c","choices":[{"message":{"content":"error"}}]}`, false, ClassNone},
		{translate.Chat, `{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`, true, ClassTransient},
		{translate.Responses, `{"id":"r","status":"completed","error":null}`, false, ClassNone},
		{translate.Responses, `{"id":"r","status":"failed","error":{"code":"rate_limit_exceeded","message":"slow down"}}`, true, ClassRate},
	}
	for _, c := range cases {
		v, _, isErr := ClassifyBody(c.ep, []byte(c.body))
		if isErr != c.isErr || v.Class != c.class {
			t.Errorf("%s %s: got %v %v", c.ep, c.body, isErr, v.Class)
		}
	}
}

// ClassifyBody's message is the caller's to keep: the body's buffer may
// be reused once it returns.
func TestClassifyBodyMessageOwnsItsBytes(t *testing.T) {
	body := []byte(`{"error":{"message":"boom","type":"server_error"}}`)
	_, msg, isErr := ClassifyBody(translate.Chat, body)
	for i := range body {
		body[i] = 'x'
	}
	if !isErr || msg != "boom" {
		t.Fatalf("ClassifyBody = %q, %v after the body was overwritten; want \"boom\", true", msg, isErr)
	}
}

// BenchmarkClassifyBody measures the check every non-stream 2xx answer
// goes through, on a chat completion that is not an error.
func BenchmarkClassifyBody(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1765000000,"model":"gpt-4.1-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, this is a short answer of twelve tokens or so."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":12,"total_tokens":24}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, isErr := ClassifyBody(translate.Chat, body); isErr {
			b.Fatal("an answer classified as an error")
		}
	}
}

// An upstream refusing account-bound state is a request-class failure
// marked StateRefused, in every shape it arrives in: OpenAI's 400, the
// same code in a Responses error event or failed response (also as the
// Codex non-stream path renders it), the Codex backend's FastAPI body, and
// Anthropic's invalid thinking signature, as a body or an error event.
// Other 400s are not.
func TestStateRefused(t *testing.T) {
	openAI := []byte(`{"error":{"message":"The encrypted content for item rs_1 could not be verified.","type":"invalid_request_error","param":null,"code":"invalid_encrypted_content"}}`)
	anthropic := []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid ` + "`signature` in `thinking`" + ` block"}}`)
	for name, v := range map[string]Verdict{
		"openai 400":            Classify(400, nil, openAI),
		"codex detail":          Classify(400, nil, []byte(`{"detail":"invalid_encrypted_content: could not decrypt"}`)),
		"anthropic 400":         Classify(400, nil, anthropic),
		"responses error event": first(ClassifyEvent(translate.Responses, []byte("error"), []byte(`{"type":"error","error":{"type":"invalid_request_error","code":"invalid_encrypted_content","message":"m"}}`))),
		"response.failed":       first(ClassifyEvent(translate.Responses, []byte("response.failed"), []byte(`{"type":"response.failed","response":{"error":{"code":"invalid_encrypted_content","message":"m"}}}`))),
		"anthropic event":       first(ClassifyEvent(translate.Messages, []byte("error"), anthropic)),
		"body":                  first(ClassifyBody(translate.Chat, openAI)),
	} {
		if !v.StateRefused || v.Class != ClassRequest {
			t.Errorf("%s: %+v", name, v)
		}
	}
	if v := Classify(400, nil, []byte(`{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":"invalid_value"}}`)); v.StateRefused {
		t.Errorf("a plain 400: %+v", v)
	}
	if got := failureStatus("invalid_encrypted_content", ""); got != 400 {
		t.Errorf("codex non-stream status %d", got)
	}
}

func first(v Verdict, _ string, _ bool) Verdict { return v }
