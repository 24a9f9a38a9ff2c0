package mock

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

var (
	acctOpenAI = Account{Name: "demo-0001", Kind: KindOpenAI, Token: "sk-proj-openai-0001-abcd", Models: []string{"gpt-5.4", "gpt-5-nano"}}
	acctCompat = Account{Name: "compat-0002", Kind: KindOpenAICompat, Token: "sk-compat-0002", OutputTokens: 5}
	acctCodex  = Account{Name: "codex-0003", Kind: KindCodex, Token: "eyJ.codex.0003", ChatGPTAccountID: "00000000-0000-4000-8000-000000000003", Models: []string{"gpt-5.4"}, OutputTokens: 20}
)

const chatBody = `{"model":"gpt-5.4","messages":[{"role":"user","content":"Hello!"}]}`

func TestAnswerText(t *testing.T) {
	if got, want := AnswerText("demo-0042", 12), "Hello from demo-0042. This is a mock answer from demo-0042. This is"; got != want {
		t.Fatalf("AnswerText = %q, want %q", got, want)
	}
	if got := AnswerText("x", 0); got != AnswerText("x", DefaultOutputTokens) {
		t.Fatalf("AnswerText(x, 0) = %q, want the default length", got)
	}
	for _, n := range []int{1, 2, 3, 9, 10, 11, 100} {
		if got := len(strings.Fields(AnswerText("demo-7", n))); got != n {
			t.Errorf("AnswerText(_, %d) has %d words", n, got)
		}
	}
	if got := AnswerText("a", 1); got != "Hello" {
		t.Errorf("AnswerText(a, 1) = %q", got)
	}
}

func TestUnknownRoute(t *testing.T) {
	_, base := startFleet(t, acctOpenAI)
	c := newClient(t)
	resp, body := do(t, c, "POST", base+"/v1/nope", acctOpenAI.Token, "{}")
	if resp.StatusCode != 404 {
		t.Fatalf("status %d, want 404", resp.StatusCode)
	}
	e := obj(t, string(body))
	sameShape(t, "error", obj(t, string(fixture(t, "openai-chat/error-401.json"))), e, true)
	if !strings.Contains(get(e, "error", "message").(string), "/v1/nope") {
		t.Errorf("message %v does not name the path", get(e, "error", "message"))
	}
	resp, body = do(t, c, "GET", base+"/backend-api/nope", "", "")
	if resp.StatusCode != 404 || get(obj(t, string(body)), "detail") == nil {
		t.Errorf("codex-side unknown route: %d %s", resp.StatusCode, body)
	}
	resp, _ = do(t, c, "GET", base+"/v1/chat/completions", acctOpenAI.Token, "")
	if resp.StatusCode != 405 {
		t.Errorf("GET /v1/chat/completions: status %d, want 405", resp.StatusCode)
	}
}

func TestChatAuthFailure(t *testing.T) {
	f, base := startFleet(t, acctOpenAI, acctCodex)
	c := newClient(t)
	want := obj(t, string(fixture(t, "openai-chat/error-401.json")))
	for _, tc := range []struct{ name, token, code string }{
		{"no key", "", ""},
		{"wrong key", "sk-proj-not-a-key-wxyz", "invalid_api_key"},
		{"codex token", acctCodex.Token, "invalid_api_key"},
	} {
		resp, body := do(t, c, "POST", base+"/v1/chat/completions", tc.token, chatBody)
		if resp.StatusCode != 401 {
			t.Errorf("%s: status %d, want 401", tc.name, resp.StatusCode)
			continue
		}
		got := obj(t, string(body))
		sameShape(t, tc.name, want, got, true)
		code, _ := get(got, "error", "code").(string)
		if code != tc.code || get(got, "error", "type") != "invalid_request_error" {
			t.Errorf("%s: error %v", tc.name, got["error"])
		}
	}
	resp, body := do(t, c, "POST", base+"/v1/chat/completions", "sk-proj-not-a-key-wxyz", chatBody)
	if msg := get(obj(t, string(body)), "error", "message").(string); resp.StatusCode != 401 || strings.Contains(msg, "not-a-key") || !strings.Contains(msg, "wxyz") {
		t.Errorf("401 message should mask the key: %q", msg)
	}
	if st := f.TotalStats(); st.Requests != 0 {
		t.Errorf("unauthenticated requests were counted: %+v", st)
	}
}

func TestChatModelNotFound(t *testing.T) {
	f, base := startFleet(t, acctOpenAI)
	c := newClient(t)
	resp, body := do(t, c, "POST", base+"/v1/chat/completions", acctOpenAI.Token, `{"model":"gpt-4.1-nano-wrong","messages":[]}`)
	if resp.StatusCode != 404 {
		t.Fatalf("status %d, want 404", resp.StatusCode)
	}
	want := obj(t, string(fixture(t, "openai-chat/error-404-model-not-found.json")))
	got := obj(t, string(body))
	sameShape(t, "404", want, got, true)
	if got, want := get(got, "error", "message"), get(want, "error", "message"); got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if get(got, "error", "code") != "model_not_found" {
		t.Errorf("code %v", get(got, "error", "code"))
	}
	if st := f.Stats(acctOpenAI.Name); st.Requests != 1 || st.Rejected != 1 || st.InFlight != 0 || st.Completed != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestChatMalformed(t *testing.T) {
	_, base := startFleet(t, acctOpenAI)
	c := newClient(t)
	want := obj(t, string(fixture(t, "openai-chat/error-400.json")))
	for _, body := range []string{`{"model":"gpt-5.4",`, `[1,2]`, `not json`, `{"messages":[]}`, `{"model":""}`} {
		resp, b := do(t, c, "POST", base+"/v1/chat/completions", acctOpenAI.Token, body)
		if resp.StatusCode != 400 {
			t.Errorf("%q: status %d, want 400", body, resp.StatusCode)
			continue
		}
		got := obj(t, string(b))
		sameShape(t, body, want, got, true)
		if get(got, "error", "type") != "invalid_request_error" {
			t.Errorf("%q: %v", body, got)
		}
	}
}

func TestChatNonStream(t *testing.T) {
	_, base := startFleet(t, acctOpenAI)
	c := newClient(t)
	resp, body := do(t, c, "POST", base+"/v1/chat/completions", acctOpenAI.Token, chatBody)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d, content-type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	got := obj(t, string(body))
	sameShape(t, "completion", obj(t, string(fixture(t, "openai-chat/nonstream-text.response.json"))), got, false)
	id, _ := got["id"].(string)
	if !strings.HasPrefix(id, "chatcmpl-") || got["object"] != "chat.completion" || got["model"] != "gpt-5.4" {
		t.Errorf("id/object/model: %v %v %v", got["id"], got["object"], got["model"])
	}
	if c := get(got, "choices", 0, "message", "content"); c != AnswerText(acctOpenAI.Name, DefaultOutputTokens) {
		t.Errorf("content %q", c)
	}
	if get(got, "choices", 0, "message", "role") != "assistant" || get(got, "choices", 0, "finish_reason") != "stop" {
		t.Errorf("choice %v", get(got, "choices", 0))
	}
	msg := get(got, "choices", 0, "message").(map[string]any)
	if r, ok := msg["refusal"]; !ok || r != nil {
		t.Errorf("refusal %v", r)
	}
	if a, ok := msg["annotations"].([]any); !ok || len(a) != 0 {
		t.Errorf("annotations %v", msg["annotations"])
	}
	in := int64(len(chatBody) / 4)
	if p, cmp, tot := num(t, get(got, "usage", "prompt_tokens")), num(t, get(got, "usage", "completion_tokens")), num(t, get(got, "usage", "total_tokens")); p != in || cmp != DefaultOutputTokens || tot != in+DefaultOutputTokens {
		t.Errorf("usage %v", got["usage"])
	}
	if resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("X-Ratelimit-Remaining-Requests") == "" {
		t.Errorf("missing x-request-id / x-ratelimit headers: %v", resp.Header)
	}
}

// checkChatStream validates a Chat SSE body and returns the parsed chunks
// (without [DONE]) and the concatenated content.
func checkChatStream(t *testing.T, body []byte, includeUsage bool) ([]map[string]any, string) {
	t.Helper()
	evs := parseSSE(t, body)
	if last := evs[len(evs)-1]; last.data != "[DONE]" || last.event != "" {
		t.Fatalf("last event %+v, want data: [DONE]", last)
	}
	var chunks []map[string]any
	var text strings.Builder
	id := ""
	for i, ev := range evs[:len(evs)-1] {
		if ev.event != "" {
			t.Fatalf("chat SSE has an event: line %q", ev.event)
		}
		ch := obj(t, ev.data)
		chunks = append(chunks, ch)
		if ch["object"] != "chat.completion.chunk" {
			t.Errorf("chunk %d object %v", i, ch["object"])
		}
		if id == "" {
			id, _ = ch["id"].(string)
		} else if ch["id"] != id {
			t.Errorf("chunk %d id %v, want %v", i, ch["id"], id)
		}
		u, hasUsage := ch["usage"]
		if hasUsage != includeUsage {
			t.Errorf("chunk %d: usage present=%v, want %v", i, hasUsage, includeUsage)
		}
		if includeUsage && i < len(evs)-2 && u != nil {
			t.Errorf("chunk %d: usage %v, want null", i, u)
		}
		if c, ok := get(ch, "choices", 0, "delta", "content").(string); ok {
			text.WriteString(c)
		}
	}
	if !strings.HasPrefix(id, "chatcmpl-") {
		t.Errorf("id %q", id)
	}
	first := get(chunks[0], "choices", 0, "delta").(map[string]any)
	if first["role"] != "assistant" || first["content"] != "" || first["refusal"] != nil || len(first) != 3 {
		t.Errorf("first delta %v", first)
	}
	return chunks, text.String()
}

func TestChatStream(t *testing.T) {
	_, base := startFleet(t, acctOpenAI)
	c := newClient(t)
	resp, body := do(t, c, "POST", base+"/v1/chat/completions", acctOpenAI.Token, `{"model":"gpt-5-nano","stream":true,"messages":[{"role":"user","content":"Hello!"}]}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	chunks, text := checkChatStream(t, body, false)
	if want := AnswerText(acctOpenAI.Name, DefaultOutputTokens); text != want {
		t.Errorf("text %q, want %q", text, want)
	}
	// role chunk + one chunk per token + finish chunk
	if len(chunks) != DefaultOutputTokens+2 {
		t.Errorf("%d chunks, want %d", len(chunks), DefaultOutputTokens+2)
	}
	words := strings.Fields(AnswerText(acctOpenAI.Name, DefaultOutputTokens))
	for i, w := range words {
		want := w + " "
		if i == len(words)-1 {
			want = w
		}
		if got := get(chunks[i+1], "choices", 0, "delta", "content"); got != want {
			t.Errorf("delta %d = %q, want %q", i, got, want)
		}
	}
	last := chunks[len(chunks)-1]
	if get(last, "choices", 0, "finish_reason") != "stop" || len(get(last, "choices", 0, "delta").(map[string]any)) != 0 {
		t.Errorf("finish chunk %v", last)
	}
	for _, ch := range chunks {
		if ch["model"] != "gpt-5-nano" {
			t.Errorf("model %v", ch["model"])
		}
	}
	// Shapes: the fixture's role, content and finish chunks, key for key.
	fx := parseSSE(t, fixture(t, "openai-chat/stream-text.sse"))
	sameShape(t, "role chunk", obj(t, fx[0].data), chunks[0], true)
	sameShape(t, "content chunk", obj(t, fx[1].data), chunks[1], true)
	sameShape(t, "finish chunk", obj(t, fx[len(fx)-2].data), last, true)
}

func TestChatStreamUsage(t *testing.T) {
	_, base := startFleet(t, acctCompat)
	c := newClient(t)
	reqBody := `{"model":"anything-goes","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"developer","content":"Hello, I'm a developer!"}]}`
	resp, body := do(t, c, "POST", base+"/v1/chat/completions", acctCompat.Token, reqBody)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	chunks, text := checkChatStream(t, body, true)
	if want := AnswerText(acctCompat.Name, 5); text != want {
		t.Errorf("text %q, want %q", text, want)
	}
	if len(chunks) != 5+3 {
		t.Fatalf("%d chunks, want %d", len(chunks), 5+3)
	}
	final := chunks[len(chunks)-1]
	if ch, ok := final["choices"].([]any); !ok || len(ch) != 0 {
		t.Errorf("usage chunk choices %v", final["choices"])
	}
	in := int64(len(reqBody) / 4)
	if num(t, get(final, "usage", "prompt_tokens")) != in || num(t, get(final, "usage", "completion_tokens")) != 5 || num(t, get(final, "usage", "total_tokens")) != in+5 {
		t.Errorf("usage %v", final["usage"])
	}
	// A compatible server's chunks: OpenAI's, without OpenAI's own fields.
	fx := parseSSE(t, fixture(t, "openai-chat/stream-usage.sse"))
	sameShape(t, "role chunk", withoutOpenAIFields(obj(t, fx[0].data)), chunks[0], true)
	sameShape(t, "finish chunk", withoutOpenAIFields(obj(t, fx[1].data)), chunks[len(chunks)-2], true)
	sameShape(t, "usage chunk", withoutOpenAIFields(obj(t, fx[2].data)), final, true)

	// Without include_usage no chunk has usage; the completion has the three counts only.
	_, body = do(t, c, "POST", base+"/v1/chat/completions", acctCompat.Token, `{"model":"qwen3-32b","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if _, text := checkChatStream(t, body, false); text != AnswerText(acctCompat.Name, 5) {
		t.Errorf("text %q", text)
	}
	_, body = do(t, c, "POST", base+"/v1/chat/completions", acctCompat.Token, chatBody)
	got := obj(t, string(body))
	sameShape(t, "completion", withoutOpenAIFields(obj(t, string(fixture(t, "openai-chat/nonstream-text.response.json")))), got, false)
	if u, _ := got["usage"].(map[string]any); len(u) != 3 || got["service_tier"] != nil || got["system_fingerprint"] != nil {
		t.Errorf("compat completion %s", body)
	}
}

// withoutOpenAIFields removes from a recorded OpenAI chunk or completion
// the fields only OpenAI itself sends (obfuscation, service_tier,
// system_fingerprint, the usage details).
func withoutOpenAIFields(m map[string]any) map[string]any {
	delete(m, "obfuscation")
	delete(m, "service_tier")
	delete(m, "system_fingerprint")
	if u, ok := m["usage"].(map[string]any); ok {
		delete(u, "prompt_tokens_details")
		delete(u, "completion_tokens_details")
	}
	return m
}

func TestChatStreamNoObfuscationAndEscaping(t *testing.T) {
	odd := Account{Name: "we\"ird\\name\t<1>", Kind: KindOpenAI, Token: "sk-odd-token-1234", OutputTokens: 9}
	_, base := startFleet(t, odd)
	c := newClient(t)
	resp, body := do(t, c, "POST", base+"/v1/chat/completions", odd.Token, `{"model":"m\u00e9","stream":true,"stream_options":{"include_obfuscation":false}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	chunks, text := checkChatStream(t, body, false)
	if want := AnswerText(odd.Name, 9); text != want {
		t.Errorf("text %q, want %q", text, want)
	}
	for _, ch := range chunks {
		if _, ok := ch["obfuscation"]; ok {
			t.Fatalf("obfuscation present with include_obfuscation=false")
		}
		if ch["model"] != "mé" {
			t.Fatalf("model %q", ch["model"])
		}
	}
}

func TestResponsesNonStream(t *testing.T) {
	_, base := startFleet(t, acctOpenAI)
	c := newClient(t)
	reqBody := `{"model":"gpt-5.4","input":"Tell me a three sentence bedtime story about a unicorn."}`
	resp, body := do(t, c, "POST", base+"/v1/responses", acctOpenAI.Token, reqBody)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	got := obj(t, string(body))
	want := obj(t, string(fixture(t, "openai-responses/nonstream-text.response.json")))
	// The spec example's usage has cache_write_tokens, which recorded streams lack.
	delete(get(want, "usage", "input_tokens_details").(map[string]any), "cache_write_tokens")
	sameShape(t, "response", want, got, false)
	if id, _ := got["id"].(string); !strings.HasPrefix(id, "resp_") || got["status"] != "completed" || got["object"] != "response" || got["model"] != "gpt-5.4" {
		t.Errorf("response head %v %v %v %v", got["id"], got["status"], got["object"], got["model"])
	}
	if txt := get(got, "output", 0, "content", 0, "text"); txt != AnswerText(acctOpenAI.Name, DefaultOutputTokens) {
		t.Errorf("text %q", txt)
	}
	if get(got, "output", 0, "type") != "message" || get(got, "output", 0, "content", 0, "type") != "output_text" {
		t.Errorf("output %v", got["output"])
	}
	in := int64(len(reqBody) / 4)
	if num(t, get(got, "usage", "input_tokens")) != in || num(t, get(got, "usage", "output_tokens")) != DefaultOutputTokens ||
		num(t, get(got, "usage", "total_tokens")) != in+DefaultOutputTokens ||
		num(t, get(got, "usage", "input_tokens_details", "cached_tokens")) != 0 ||
		num(t, get(got, "usage", "output_tokens_details", "reasoning_tokens")) != 0 {
		t.Errorf("usage %v", got["usage"])
	}
}

// checkResponsesStream validates a Responses SSE body: event/data pairs with
// matching types, sequence numbers 0..n-1, the event order, the deltas adding
// up to want, and response.completed repeating the done item. It returns the
// events' data parsed.
func checkResponsesStream(t *testing.T, body []byte, want string, tokens int, store bool) []map[string]any {
	t.Helper()
	evs := parseSSE(t, body)
	var datas []map[string]any
	var types []string
	var text strings.Builder
	for i, ev := range evs {
		d := obj(t, ev.data)
		datas = append(datas, d)
		if ev.event == "" || d["type"] != ev.event {
			t.Fatalf("event %d: event line %q, data type %v", i, ev.event, d["type"])
		}
		if n := num(t, d["sequence_number"]); n != int64(i) {
			t.Fatalf("event %d has sequence_number %d", i, n)
		}
		types = append(types, ev.event)
		if ev.event == "response.output_text.delta" {
			text.WriteString(d["delta"].(string))
		}
	}
	wantTypes := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for range tokens {
		wantTypes = append(wantTypes, "response.output_text.delta")
	}
	wantTypes = append(wantTypes, "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed")
	if strings.Join(types, ",") != strings.Join(wantTypes, ",") {
		t.Fatalf("event order\n got %v\nwant %v", types, wantTypes)
	}
	if text.String() != want {
		t.Errorf("deltas %q, want %q", text.String(), want)
	}
	n := len(datas)
	if got := datas[n-4]["text"]; got != want {
		t.Errorf("output_text.done text %q", got)
	}
	if got := get(datas[n-3], "part", "text"); got != want {
		t.Errorf("content_part.done text %q", got)
	}
	done := datas[n-2]["item"]
	completed := datas[n-1]["response"].(map[string]any)
	if completed["status"] != "completed" || get(datas[0], "response", "status") != "in_progress" {
		t.Errorf("statuses %v / %v", get(datas[0], "response", "status"), completed["status"])
	}
	if out := completed["output"].([]any); len(out) != 1 || !jsonEqual(t, out[0], done) {
		t.Errorf("completed output %v, want [%v]", out, done)
	}
	if get(datas[0], "response", "usage") != nil || completed["usage"] == nil {
		t.Errorf("usage: created %v completed %v", get(datas[0], "response", "usage"), completed["usage"])
	}
	if num(t, get(completed, "usage", "output_tokens")) != int64(tokens) {
		t.Errorf("output_tokens %v", get(completed, "usage", "output_tokens"))
	}
	if completed["store"] != store {
		t.Errorf("store %v, want %v", completed["store"], store)
	}
	itemID := get(datas[2], "item", "id")
	for _, d := range datas[3 : n-2] {
		if d["item_id"] != itemID {
			t.Errorf("item_id %v, want %v", d["item_id"], itemID)
		}
	}
	return datas
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	return mustJSON(t, a) == mustJSON(t, b)
}

func TestResponsesStream(t *testing.T) {
	_, base := startFleet(t, acctOpenAI)
	c := newClient(t)
	resp, body := do(t, c, "POST", base+"/v1/responses", acctOpenAI.Token, `{"model":"gpt-5.4","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"prompt"}]}],"stream":true,"prompt_cache_key":"pck-1"}`)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	datas := checkResponsesStream(t, body, AnswerText(acctOpenAI.Name, DefaultOutputTokens), DefaultOutputTokens, true)
	if get(datas[0], "response", "prompt_cache_key") != "pck-1" {
		t.Errorf("prompt_cache_key %v", get(datas[0], "response", "prompt_cache_key"))
	}
	// Shapes against the recorded stream (its message events; the reasoning
	// item events have no counterpart here).
	fx := parseSSE(t, fixture(t, "openai-responses/stream-text.sse"))
	byType := map[string]map[string]any{}
	for _, ev := range fx {
		d := obj(t, ev.data)
		if get(d, "item", "type") == "reasoning" {
			continue
		}
		byType[ev.event] = d
	}
	for _, d := range datas {
		typ := d["type"].(string)
		want, ok := byType[typ]
		if !ok {
			t.Errorf("event %s not in the fixture", typ)
			continue
		}
		if typ == "response.completed" {
			// the fixture's output[0] is a reasoning item
			want = obj(t, mustJSON(t, want))
			r := want["response"].(map[string]any)
			r["output"] = r["output"].([]any)[1:]
		}
		sameShape(t, typ, want, d, !strings.HasPrefix(typ, "response.c") && !strings.HasPrefix(typ, "response.in_progress"))
	}
}

func TestResponsesRefusesOtherKinds(t *testing.T) {
	_, base := startFleet(t, acctCompat)
	c := newClient(t)
	resp, _ := do(t, c, "POST", base+"/v1/responses", acctCompat.Token, `{"model":"x","input":"hi"}`)
	if resp.StatusCode != 401 {
		t.Errorf("openai_compat on /v1/responses: status %d, want 401", resp.StatusCode)
	}
}

func codexHeaders(acc Account) []string {
	return []string{"chatgpt-account-id", acc.ChatGPTAccountID, "originator", "codex_exec", "session-id", "s-1"}
}

const codexBody = `{"model":"gpt-5.4","instructions":"","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"List the files."}]}],"tools":[],"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{"effort":"medium","summary":"auto"},"store":false,"stream":true,"include":["reasoning.encrypted_content"],"prompt_cache_key":"0199a0b1-0000-7000-8000-00000000c0de"}`

func TestCodexStream(t *testing.T) {
	f, base := startFleet(t, acctCodex)
	c := newClient(t)
	resp, body := do(t, c, "POST", base+"/backend-api/codex/responses", acctCodex.Token, codexBody, codexHeaders(acctCodex)...)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	checkResponsesStream(t, body, AnswerText(acctCodex.Name, 20), 20, false)

	// Every x-codex-* header of the recorded 200, present and plausible.
	fx := string(fixture(t, "codex-backend/response-headers.200.http"))
	for _, line := range strings.Split(fx, "\n") {
		name, _, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(strings.ToLower(name), "x-codex-") {
			continue
		}
		if _, ok := resp.Header[http.CanonicalHeaderKey(name)]; !ok {
			t.Errorf("missing header %s", name)
		}
	}
	for _, h := range []string{"X-Codex-Primary-Used-Percent", "X-Codex-Secondary-Used-Percent"} {
		v, err := strconv.ParseFloat(resp.Header.Get(h), 64)
		if err != nil || v < 0 || v > 100 {
			t.Errorf("%s = %q", h, resp.Header.Get(h))
		}
	}
	for _, h := range []string{"X-Codex-Primary-Window-Minutes", "X-Codex-Primary-Reset-After-Seconds", "X-Codex-Primary-Reset-At", "X-Codex-Secondary-Window-Minutes", "X-Codex-Secondary-Reset-After-Seconds"} {
		if v, err := strconv.ParseInt(resp.Header.Get(h), 10, 64); err != nil || v <= 0 {
			t.Errorf("%s = %q", h, resp.Header.Get(h))
		}
	}
	if resp.Header.Get("X-Codex-Turn-State") == "" || resp.Header.Get("Openai-Model") != "gpt-5.4" {
		t.Errorf("turn state %q, openai-model %q", resp.Header.Get("X-Codex-Turn-State"), resp.Header.Get("Openai-Model"))
	}
	if st := f.Stats(acctCodex.Name); st.Requests != 1 || st.Completed != 1 || st.InFlight != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestCodexZstdBody(t *testing.T) {
	_, base := startFleet(t, acctCodex)
	c := newClient(t)
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	compressed := enc.EncodeAll([]byte(codexBody), nil)
	req, _ := http.NewRequest("POST", base+"/backend-api/codex/responses", bytes.NewReader(compressed))
	req.Header.Set("Authorization", "Bearer "+acctCodex.Token)
	req.Header.Set("chatgpt-account-id", acctCodex.ChatGPTAccountID)
	req.Header.Set("Content-Encoding", "zstd")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	datas := checkResponsesStream(t, body, AnswerText(acctCodex.Name, 20), 20, false)
	// input tokens are estimated from the decompressed body
	if got := num(t, get(datas[len(datas)-1], "response", "usage", "input_tokens")); got != int64(len(codexBody)/4) {
		t.Errorf("input_tokens %d, want %d", got, len(codexBody)/4)
	}
}

func TestCodexRefusals(t *testing.T) {
	f, base := startFleet(t, acctCodex, acctOpenAI)
	c := newClient(t)
	url := base + "/backend-api/codex/responses"
	hdr := codexHeaders(acctCodex)
	for _, tc := range []struct {
		name, token, body string
		hdr               []string
		status            int
		fixture, detail   string
	}{
		{"stream false", acctCodex.Token, strings.Replace(codexBody, `"stream":true`, `"stream":false`, 1), hdr, 400, "codex-backend/error-400-stream.json", ""},
		{"stream missing", acctCodex.Token, strings.Replace(codexBody, `"stream":true,`, ``, 1), hdr, 400, "codex-backend/error-400-stream.json", ""},
		{"store true", acctCodex.Token, strings.Replace(codexBody, `"store":false`, `"store":true`, 1), hdr, 400, "codex-backend/error-400-store.json", ""},
		{"store missing", acctCodex.Token, strings.Replace(codexBody, `"store":false,`, ``, 1), hdr, 400, "codex-backend/error-400-store.json", ""},
		{"bad token", "eyJ.wrong", codexBody, hdr, 401, "codex-backend/error-401-unauthorized.json", ""},
		{"no token", "", codexBody, hdr, 401, "codex-backend/error-401-unauthorized.json", ""},
		{"openai key", acctOpenAI.Token, codexBody, hdr, 401, "codex-backend/error-401-unauthorized.json", ""},
		{"no account id", acctCodex.Token, codexBody, nil, 401, "codex-backend/error-401-unauthorized.json", ""},
		{"other account id", acctCodex.Token, codexBody, []string{"chatgpt-account-id", "00000000-0000-4000-8000-00000000ffff"}, 403, "", "You do not have access to this workspace."},
		{"model", acctCodex.Token, strings.Replace(codexBody, `"gpt-5.4"`, `"gpt-5.4-mini"`, 1), hdr, 400, "codex-backend/error-400-model-not-supported.json", ""},
	} {
		resp, body := do(t, c, "POST", url, tc.token, tc.body, tc.hdr...)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, resp.StatusCode, tc.status, body)
			continue
		}
		want := tc.detail
		if tc.fixture != "" {
			want = obj(t, string(fixture(t, tc.fixture)))["detail"].(string)
		}
		got := obj(t, string(body))
		if len(got) != 1 || got["detail"] != want {
			t.Errorf("%s: body %s, want detail %q", tc.name, body, want)
		}
	}
	if st := f.Stats(acctCodex.Name); st.Requests != 5 || st.Rejected != 5 || st.InFlight != 0 {
		t.Errorf("stats %+v (the 5 authenticated refusals count as Rejected)", st)
	}
}

func TestModels(t *testing.T) {
	_, base := startFleet(t, acctOpenAI, acctCompat, acctCodex)
	c := newClient(t)
	check := func(name string, body []byte, want []string) map[string]any {
		got := obj(t, string(body))
		if got["object"] != "list" {
			t.Errorf("%s: object %v", name, got["object"])
		}
		data, _ := got["data"].([]any)
		var ids []string
		for _, d := range data {
			m := d.(map[string]any)
			if m["object"] != "model" || m["owned_by"] == nil || m["created"] == nil {
				t.Errorf("%s: model entry %v", name, m)
			}
			ids = append(ids, m["id"].(string))
		}
		if strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Errorf("%s: ids %v, want %v", name, ids, want)
		}
		return got
	}
	resp, body := do(t, c, "GET", base+"/v1/models", acctOpenAI.Token, "")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	check("openai", body, acctOpenAI.Models)
	_, body = do(t, c, "GET", base+"/v1/models", acctCompat.Token, "")
	check("compat", body, DefaultModels())
	resp, body = do(t, c, "GET", base+"/backend-api/codex/models?client_version=0.169.0", acctCodex.Token, "", codexHeaders(acctCodex)...)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == "" {
		t.Fatalf("codex models: status %d etag %q", resp.StatusCode, resp.Header.Get("ETag"))
	}
	got := check("codex", body, acctCodex.Models)
	if get(got, "models", 0, "slug") != "gpt-5.4" {
		t.Errorf("codex models[] %v", got["models"])
	}
	resp, _ = do(t, c, "GET", base+"/v1/models", "sk-nope-nope-nope", "")
	if resp.StatusCode != 401 {
		t.Errorf("unauthenticated /v1/models: %d", resp.StatusCode)
	}
	resp, _ = do(t, c, "GET", base+"/backend-api/codex/models", acctCodex.Token, "")
	if resp.StatusCode != 401 {
		t.Errorf("codex models without account id: %d", resp.StatusCode)
	}
}

// TestResponsesMissingInput: /v1/responses refuses a body without "input"
// (a Chat Completions body, with "messages") with the API's 400 in the
// Responses (OpenAI) error shape, param input, code
// missing_required_parameter, and counts it as rejected; "prompt" or
// "conversation" stand for input and are served.
func TestResponsesMissingInput(t *testing.T) {
	f, base := startFleet(t, acctOpenAI)
	c := newClient(t)
	want := obj(t, string(fixture(t, "openai-chat/error-400.json"))) // the Responses API's envelope is Chat's (shared/fixtures README)
	for _, body := range []string{
		`{"model":"gpt-5.4","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-5.4","messages":[{"role":"user","content":"hi"}],"stream":true}`,
		`{"model":"gpt-5.4"}`,
		`{"model":"gpt-5.4","input":null}`,
	} {
		resp, b := do(t, c, "POST", base+"/v1/responses", acctOpenAI.Token, body)
		if resp.StatusCode != 400 {
			t.Errorf("%s: status %d %s, want 400", body, resp.StatusCode, b)
			continue
		}
		got := obj(t, string(b))
		sameShape(t, body, want, got, true)
		if get(got, "error", "message") != "Missing required parameter: 'input'." || get(got, "error", "param") != "input" ||
			get(got, "error", "code") != "missing_required_parameter" || get(got, "error", "type") != "invalid_request_error" {
			t.Errorf("%s: %s", body, b)
		}
	}
	if st := f.Stats(acctOpenAI.Name); st.Rejected != 4 || st.Completed != 0 {
		t.Errorf("stats %+v, want 4 rejected", st)
	}
	for _, body := range []string{`{"model":"gpt-5.4","input":"hi"}`, `{"model":"gpt-5.4","prompt":{"id":"pmpt_1"}}`, `{"model":"gpt-5.4","conversation":"conv_1","input":[]}`} {
		if resp, b := do(t, c, "POST", base+"/v1/responses", acctOpenAI.Token, body); resp.StatusCode != 200 {
			t.Errorf("%s: status %d %s, want 200", body, resp.StatusCode, b)
		}
	}
}
