package mock

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
)

// finishOf returns how an answer says it ended: Chat's finish_reason, a
// Responses status (and incomplete_details.reason), Messages' stop_reason;
// and its output token count from the usage.
func finishOf(t *testing.T, path string, stream bool, body []byte) (finish string, outTokens int64) {
	t.Helper()
	if !stream {
		got := obj(t, string(body))
		switch path {
		case "/v1/chat/completions":
			return get(got, "choices", 0, "finish_reason").(string), num(t, get(got, "usage", "completion_tokens"))
		case "/v1/messages":
			return got["stop_reason"].(string), num(t, get(got, "usage", "output_tokens"))
		}
		return responsesFinish(t, got), num(t, get(got, "usage", "output_tokens"))
	}
	evs := parseSSE(t, body)
	for _, ev := range evs {
		if ev.data == "[DONE]" {
			continue
		}
		d := obj(t, ev.data)
		switch {
		case path == "/v1/chat/completions":
			if f, ok := get(d, "choices", 0, "finish_reason").(string); ok {
				finish = f
			}
			if u := get(d, "usage"); u != nil {
				outTokens = num(t, get(u.(map[string]any), "completion_tokens"))
			}
		case path == "/v1/messages":
			if ev.event == "message_delta" {
				finish, outTokens = get(d, "delta", "stop_reason").(string), num(t, get(d, "usage", "output_tokens"))
			}
		case ev.event == "response.completed" || ev.event == "response.incomplete":
			r := d["response"].(map[string]any)
			if st := r["status"].(string); st != strings.TrimPrefix(ev.event, "response.") {
				t.Errorf("event %s carries status %s", ev.event, st)
			}
			finish, outTokens = responsesFinish(t, r), num(t, get(r, "usage", "output_tokens"))
		}
	}
	return finish, outTokens
}

// responsesFinish is a response object's status, with the incomplete
// reason after a slash; the message item's status must agree.
func responsesFinish(t *testing.T, r map[string]any) string {
	t.Helper()
	st := r["status"].(string)
	if item, ok := get(r, "output", 0).(map[string]any); ok && item["type"] == "message" && item["status"] != st {
		t.Errorf("message item %v in a %s response", item["status"], st)
	}
	if st == "incomplete" {
		return st + "/" + get(r, "incomplete_details", "reason").(string)
	}
	if r["incomplete_details"] != nil {
		t.Errorf("incomplete_details %v in a %s response", r["incomplete_details"], st)
	}
	return st
}

// TestOutputLimit: every protocol, JSON and stream, cuts the answer at the
// request's output limit field (only the route's own field), says so the
// way the real API does, and counts what it generated; a limit the answer
// fits in changes nothing. A scripted tool call needing more than the limit
// becomes text cut at it.
func TestOutputLimit(t *testing.T) {
	_, base := startFleet(t, toolOpenAI, toolCompat, toolAnthropic, longOpenAI)
	c := newClient(t)
	chatTools := `"tools":[{"type":"function","function":{"name":"shell","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}],`
	respTools := `"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}],`
	msgTools := `"tools":[{"name":"Bash","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}],`
	const ask = `"Run 'echo hi' please"`
	cases := []struct {
		name, path string
		acc        Account
		body       string // %s: the stream flag
		words      int    // the text's words; 0: a tool call
		finish     string // "" : not cut
	}{
		{"chat max_tokens", "/v1/chat/completions", toolOpenAI, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]%s}`, 5, "length"},
		{"chat max_completion_tokens", "/v1/chat/completions", toolOpenAI, `{"model":"m","max_completion_tokens":3,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]%s}`, 3, "length"},
		{"chat compat", "/v1/chat/completions", toolCompat, `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]%s}`, 4, "length"},
		{"chat fits", "/v1/chat/completions", toolOpenAI, `{"model":"m","max_completion_tokens":12,"messages":[{"role":"user","content":"hi"}]%s}`, DefaultOutputTokens, "stop"},
		{"chat tool call, limit 1", "/v1/chat/completions", toolOpenAI, `{"model":"m","max_tokens":1,` + chatTools + `"messages":[{"role":"user","content":` + ask + `}]%s}`, 1, "length"},
		{"chat tool call fits", "/v1/chat/completions", toolOpenAI, `{"model":"m","max_tokens":2,` + chatTools + `"messages":[{"role":"user","content":` + ask + `}]%s}`, 0, "tool_calls"},
		{"responses", "/v1/responses", longOpenAI, `{"model":"m","max_output_tokens":20,"input":"hi"%s}`, 20, "incomplete/max_output_tokens"},
		{"responses fits at the least limit", "/v1/responses", toolOpenAI, `{"model":"m","max_output_tokens":16,"input":"hi"%s}`, DefaultOutputTokens, "completed"},
		{"responses max_tokens ignored", "/v1/responses", toolOpenAI, `{"model":"m","max_tokens":6,"input":"hi"%s}`, DefaultOutputTokens, "completed"},
		{"responses tool call, least limit", "/v1/responses", toolOpenAI, `{"model":"m","max_output_tokens":16,` + respTools + `"input":` + ask + `%s}`, 0, "completed"},
		{"messages", "/v1/messages", toolAnthropic, `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}]%s}`, 2, "max_tokens"},
		{"messages fits", "/v1/messages", toolAnthropic, `{"model":"m","max_tokens":4096,"messages":[{"role":"user","content":"hi"}]%s}`, DefaultOutputTokens, "end_turn"},
		{"messages tool call, limit 1", "/v1/messages", toolAnthropic, `{"model":"m","max_tokens":1,` + msgTools + `"messages":[{"role":"user","content":` + ask + `}]%s}`, 1, "max_tokens"},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: " json", true: " stream"}[stream], func(t *testing.T) {
				flag := ""
				if stream {
					flag = `,"stream":true,"stream_options":{"include_usage":true}`
					if tc.path != "/v1/chat/completions" {
						flag = `,"stream":true`
					}
				}
				tok, hdr := tc.acc.Token, []string(nil)
				if tc.acc.Kind == KindAnthropic {
					tok, hdr = "", anthropicHeaders(tc.acc)
				}
				resp, body := do(t, c, "POST", base+tc.path, tok, strings.Replace(tc.body, "%s", flag, 1), hdr...)
				if resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				call, text := answerOf(t, tc.path, stream, body)
				finish, out := finishOf(t, tc.path, stream, body)
				if finish != tc.finish {
					t.Errorf("finish %q, want %q", finish, tc.finish)
				}
				if tc.words == 0 {
					if call.name == "" || out != toolFragments {
						t.Errorf("call %+v, %d output tokens; want the tool call, %d", call, out, toolFragments)
					}
					return
				}
				if call.name != "" || text != AnswerText(tc.acc.Name, tc.words) || out != int64(tc.words) {
					t.Errorf("call %+v text %q, %d output tokens; want %q, %d", call, text, out, AnswerText(tc.acc.Name, tc.words), tc.words)
				}
			})
		}
	}
}

// TestOutputLimitResponsesShape: a Responses answer cut by
// max_output_tokens has the recorded incomplete stream's shape
// (openai-responses/stream-incomplete.sse): it ends with
// response.incomplete, echoes max_output_tokens, and its JSON form is the
// same response object.
func TestOutputLimitResponsesShape(t *testing.T) {
	_, base := startFleet(t, longOpenAI)
	c := newClient(t)
	fx := parseSSE(t, fixture(t, "openai-responses/stream-incomplete.sse"))
	want := obj(t, fx[len(fx)-1].data)
	// The fixture's only output item is reasoning; the mock's is the message.
	delete(want["response"].(map[string]any), "output")

	_, body := do(t, c, "POST", base+"/v1/responses", longOpenAI.Token, `{"model":"gpt-5.4","max_output_tokens":16,"input":"hi","stream":true}`)
	evs := parseSSE(t, body)
	last := evs[len(evs)-1]
	if fx[len(fx)-1].event != "response.incomplete" || last.event != "response.incomplete" {
		t.Fatalf("last event %q (fixture %q)", last.event, fx[len(fx)-1].event)
	}
	got := obj(t, last.data)
	sameShape(t, "response.incomplete", want, got, false)
	r := got["response"].(map[string]any)
	if num(t, r["max_output_tokens"]) != 16 || get(r, "incomplete_details", "reason") != "max_output_tokens" {
		t.Errorf("max_output_tokens %v, incomplete_details %v", r["max_output_tokens"], r["incomplete_details"])
	}
	if created := obj(t, evs[0].data); num(t, get(created, "response", "max_output_tokens")) != 16 {
		t.Errorf("response.created max_output_tokens %v", get(created, "response", "max_output_tokens"))
	}
	_, body = do(t, c, "POST", base+"/v1/responses", longOpenAI.Token, `{"model":"gpt-5.4","max_output_tokens":16,"input":"hi"}`)
	sameShape(t, "response", want["response"], obj(t, string(body)), false)
}

// TestToolChoiceNone: a request asking to run a command with a shell tool
// offered but tool_choice "none" ({"type":"none"} in Messages) is answered
// with text, in every protocol, and the Responses object echoes the choice.
func TestToolChoiceNone(t *testing.T) {
	_, base := startFleet(t, toolOpenAI, toolAnthropic)
	c := newClient(t)
	const ask = `"Run 'echo hi' please"`
	cases := []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"m","tool_choice":"none","tools":[{"type":"function","function":{"name":"shell","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}],"messages":[{"role":"user","content":` + ask + `}]%s}`},
		{"/v1/responses", `{"model":"m","tool_choice":"none","tools":[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}],"input":` + ask + `%s}`},
		{"/v1/messages", `{"model":"m","max_tokens":64,"tool_choice":{"type":"none"},"tools":[{"name":"Bash","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}],"messages":[{"role":"user","content":` + ask + `}]%s}`},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			acc, tok, hdr := toolOpenAI, toolOpenAI.Token, []string(nil)
			if tc.path == "/v1/messages" {
				acc, tok, hdr = toolAnthropic, "", anthropicHeaders(toolAnthropic)
			}
			flag := map[bool]string{false: "", true: `,"stream":true`}[stream]
			resp, body := do(t, c, "POST", base+tc.path, tok, strings.Replace(tc.body, "%s", flag, 1), hdr...)
			if resp.StatusCode != 200 {
				t.Fatalf("%s stream %v: status %d: %s", tc.path, stream, resp.StatusCode, body)
			}
			call, text := answerOf(t, tc.path, stream, body)
			if call.name != "" || text != AnswerText(acc.Name, 0) {
				t.Errorf("%s stream %v: call %+v text %q, want the text", tc.path, stream, call, text)
			}
			if tc.path == "/v1/responses" && !stream {
				if got := obj(t, string(body)); got["tool_choice"] != "none" {
					t.Errorf("tool_choice %v", got["tool_choice"])
				}
			}
			// the same request under "auto" still calls the tool
			auto := strings.NewReplacer(`"tool_choice":"none",`, "", `"tool_choice":{"type":"none"},`, "").Replace(tc.body)
			if _, body := do(t, c, "POST", base+tc.path, tok, strings.Replace(auto, "%s", flag, 1), hdr...); func() bool { call, _ := answerOf(t, tc.path, stream, body); return call.name == "" }() {
				t.Errorf("%s stream %v: no tool call without tool_choice none", tc.path, stream)
			}
		}
	}
}

// TestOutputLimitWebSocket: the Responses WebSocket honours
// max_output_tokens and tool_choice "none" like HTTP.
func TestOutputLimitWebSocket(t *testing.T) {
	_, base := startFleet(t, longOpenAI)
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	conn, _, err := d.Dial("ws"+strings.TrimPrefix(base, "http")+"/v1/responses", http.Header{"Authorization": {"Bearer " + longOpenAI.Token}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	turn := func(frame string) map[string]any {
		t.Helper()
		if err := conn.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
			t.Fatal(err)
		}
		for {
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, b, err := conn.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			ev := obj(t, string(b))
			switch ev["type"] {
			case "response.completed", "response.incomplete", "error":
				return ev
			}
		}
	}
	ev := turn(`{"type":"response.create","model":"m","max_output_tokens":17,"input":"hi"}`)
	r, _ := ev["response"].(map[string]any)
	if ev["type"] != "response.incomplete" || responsesFinish(t, r) != "incomplete/max_output_tokens" ||
		num(t, get(r, "usage", "output_tokens")) != 17 || get(r, "output", 0, "content", 0, "text") != AnswerText(longOpenAI.Name, 17) {
		t.Fatalf("limited turn %v", ev)
	}
	ev = turn(`{"type":"response.create","model":"m","max_output_tokens":15,"input":"hi"}`)
	if ev["type"] != "error" || num(t, ev["status"]) != 400 || get(ev, "error", "code") != "integer_below_min_value" ||
		get(ev, "error", "param") != "max_output_tokens" {
		t.Fatalf("max_output_tokens 15 turn %v, want the API's 400 integer_below_min_value", ev)
	}
	ev = turn(`{"type":"response.create","model":"m","tool_choice":"none","tools":[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}],"input":"Run 'echo hi' please"}`)
	if ev["type"] != "response.completed" || get(ev, "response", "output", 0, "type") != "message" {
		t.Fatalf("tool_choice none turn %v", ev)
	}
}

// longOpenAI answers with more words than the Responses API's least
// max_output_tokens (16), so that limit can cut its answers.
var longOpenAI = Account{Name: "l-openai", Kind: KindOpenAI, Token: "sk-proj-long-0005", OutputTokens: 40}

// TestResponsesOutputBelowMin: /v1/responses refuses a max_output_tokens
// below 16 as the Responses API does, 400 invalid_request_error
// integer_below_min_value with param max_output_tokens (the envelope of
// fixtures openai-responses/error-400.json; the wording of the API's
// integer range checks), streamed or not, before it answers; 16 is served.
// Chat's and Messages' limits have no such floor.
func TestResponsesOutputBelowMin(t *testing.T) {
	_, base := startFleet(t, toolOpenAI)
	c := newClient(t)
	for _, tc := range []struct{ v, got string }{{"15", "15"}, {"1", "1"}, {"0", "0"}, {"-3", "-3"}, {"1e1", "10"}} {
		for _, stream := range []string{"", `,"stream":true`} {
			resp, body := do(t, c, "POST", base+"/v1/responses", toolOpenAI.Token, `{"model":"m","max_output_tokens":`+tc.v+`,"input":"hi"`+stream+`}`)
			want := `{"error":{"message":"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got ` + tc.got +
				` instead.","type":"invalid_request_error","param":"max_output_tokens","code":"integer_below_min_value"}}`
			if resp.StatusCode != 400 || string(body) != want {
				t.Errorf("max_output_tokens %s%s: %d %s\nwant 400 %s", tc.v, stream, resp.StatusCode, body, want)
			}
		}
	}
	if resp, body := do(t, c, "POST", base+"/v1/responses", toolOpenAI.Token, `{"model":"m","max_output_tokens":16,"input":"hi"}`); resp.StatusCode != 200 {
		t.Errorf("max_output_tokens 16: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, c, "POST", base+"/v1/chat/completions", toolOpenAI.Token, `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 {
		t.Errorf("chat max_tokens 3: %d %s", resp.StatusCode, body)
	}
}
