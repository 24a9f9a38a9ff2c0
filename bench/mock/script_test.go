package mock

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fasthttp/websocket"
	"github.com/tidwall/gjson"
)

func TestScriptedCommand(t *testing.T) {
	for _, tc := range []struct {
		text, cmd string
		ok        bool
	}{
		{"Run 'echo hello-from-capture' in the shell and tell me the output.", "echo hello-from-capture", true},
		{"Run 'echo hello-from-capture' with Bash and tell me the output.", "echo hello-from-capture", true},
		{`please run "ls -la /tmp" now`, "ls -la /tmp", true},
		{"RUN `date`", "date", true},
		{"Can you echo hi there.\nThanks", "echo hi there", true},
		{"Don't run away; say hi", "", false},
		{"say hi", "", false},
		{"the word rerun 'x' is not a run", "", false},
		{"an unclosed run 'echo", "", false},
		{"echoes echo", "", false},
	} {
		cmd, ok := ScriptedCommand(tc.text)
		if cmd != tc.cmd || ok != tc.ok {
			t.Errorf("ScriptedCommand(%q) = %q, %v; want %q, %v", tc.text, cmd, ok, tc.cmd, tc.ok)
		}
	}
	for in, want := range map[string]string{
		"  x\n y ": "Hello from a-1. The tool returned: x y",
		"ok\n<system-reminder>\nnote\n</system-reminder>":             "Hello from a-1. The tool returned: ok",
		"a<system-reminder>b</system-reminder>c<system-reminder>open": "Hello from a-1. The tool returned: a c",
	} {
		if got := ToolResultText("a-1", in); got != want {
			t.Errorf("ToolResultText(%q) = %q, want %q", in, got, want)
		}
	}
}

// Accounts serving any model, for the client captures (gpt-capture,
// claude-opus-5-5).
var (
	toolOpenAI    = Account{Name: "t-openai", Kind: KindOpenAI, Token: "sk-proj-tool-0001"}
	toolCompat    = Account{Name: "t-compat", Kind: KindOpenAICompat, Token: "sk-compat-tool-0002"}
	toolCodex     = Account{Name: "t-codex", Kind: KindCodex, Token: "eyJ.tool.codex", ChatGPTAccountID: "00000000-0000-4000-8000-0000000000c3"}
	toolAnthropic = Account{Name: "t-claude", Kind: KindAnthropic, Token: "sk-ant-tool-0004"}
)

// toolCall is what a scripted answer asked for.
type toolCall struct{ name, args string }

// answerOf reads the tool call or the text of any protocol's answer,
// streamed or not.
func answerOf(t *testing.T, path string, stream bool, body []byte) (toolCall, string) {
	t.Helper()
	var tc toolCall
	var text strings.Builder
	if !stream {
		got := obj(t, string(body))
		switch path {
		case "/v1/chat/completions":
			if c, ok := get(got, "choices", 0, "message", "content").(string); ok {
				text.WriteString(c)
			}
			if n, ok := get(got, "choices", 0, "message", "tool_calls", 0, "function", "name").(string); ok {
				tc = toolCall{n, get(got, "choices", 0, "message", "tool_calls", 0, "function", "arguments").(string)}
				if get(got, "choices", 0, "finish_reason") != "tool_calls" {
					t.Errorf("finish_reason %v", get(got, "choices", 0, "finish_reason"))
				}
			}
		case "/v1/messages":
			switch get(got, "content", 0, "type") {
			case "text":
				text.WriteString(get(got, "content", 0, "text").(string))
			case "tool_use":
				tc = toolCall{get(got, "content", 0, "name").(string), mustJSON(t, get(got, "content", 0, "input"))}
				if got["stop_reason"] != "tool_use" {
					t.Errorf("stop_reason %v", got["stop_reason"])
				}
			}
		default:
			switch get(got, "output", 0, "type") {
			case "message":
				text.WriteString(get(got, "output", 0, "content", 0, "text").(string))
			case "function_call":
				tc = toolCall{get(got, "output", 0, "name").(string), get(got, "output", 0, "arguments").(string)}
			}
		}
		return tc, text.String()
	}
	var args strings.Builder
	evs := parseSSE(t, body)
	for _, ev := range evs {
		if ev.data == "[DONE]" {
			continue
		}
		d := obj(t, ev.data)
		switch {
		case path == "/v1/chat/completions":
			if c, ok := get(d, "choices", 0, "delta", "content").(string); ok {
				text.WriteString(c)
			}
			if n, ok := get(d, "choices", 0, "delta", "tool_calls", 0, "function", "name").(string); ok {
				tc.name = n
			}
			if a, ok := get(d, "choices", 0, "delta", "tool_calls", 0, "function", "arguments").(string); ok {
				args.WriteString(a)
			}
		case path == "/v1/messages":
			switch ev.event {
			case "content_block_start":
				if get(d, "content_block", "type") == "tool_use" {
					tc.name = get(d, "content_block", "name").(string)
				}
			case "content_block_delta":
				if s, ok := get(d, "delta", "text").(string); ok {
					text.WriteString(s)
				}
				if s, ok := get(d, "delta", "partial_json").(string); ok {
					args.WriteString(s)
				}
			}
		default:
			switch ev.event {
			case "response.output_text.delta":
				text.WriteString(d["delta"].(string))
			case "response.function_call_arguments.delta":
				args.WriteString(d["delta"].(string))
			case "response.output_item.added":
				if get(d, "item", "type") == "function_call" {
					tc.name = get(d, "item", "name").(string)
				}
			case "response.completed":
				if tc.name != "" && get(d, "response", "output", 0, "arguments") != args.String() {
					t.Errorf("completed arguments %v, deltas %q", get(d, "response", "output", 0, "arguments"), args.String())
				}
			}
		}
	}
	tc.args = args.String()
	return tc, text.String()
}

// canonJSON re-encodes a JSON text, so that objects compare by value.
func canonJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("arguments %q: %v", s, err)
	}
	return mustJSON(t, v)
}

// The captured requests of the real clients get the answers those clients
// need for a tool turn: a call to their shell tool, then text quoting what
// it printed.
func TestScriptClientCaptures(t *testing.T) {
	_, base := startFleet(t, toolCodex, toolAnthropic)
	c := newClient(t)
	for _, tc := range []struct {
		file, path string
		hdr        []string
		tool, args string // a tool call, or
		quote      string // text containing this
	}{
		{"clients/codex-cli-tool-01.body.json", "/backend-api/codex/responses", codexHeaders(toolCodex), "exec_command", `{"cmd":"echo hello-from-capture"}`, ""},
		{"clients/codex-cli-tool-02.body.json", "/backend-api/codex/responses", codexHeaders(toolCodex), "", "", "hello-from-capture"},
		{"clients/codex-cli-plain-01.body.json", "/backend-api/codex/responses", codexHeaders(toolCodex), "", "", AnswerText(toolCodex.Name, 0)},
		{"clients/claude-code-tool-01.body.json", "/v1/messages", anthropicHeaders(toolAnthropic), "Bash", `{"command":"echo hello-from-capture"}`, ""},
		{"clients/claude-code-tool-02.body.json", "/v1/messages", anthropicHeaders(toolAnthropic), "", "", "hello-from-capture"},
		{"clients/claude-code-plain-01.body.json", "/v1/messages", anthropicHeaders(toolAnthropic), "", "", AnswerText(toolAnthropic.Name, 0)},
	} {
		t.Run(tc.file, func(t *testing.T) {
			tok := ""
			if tc.path != "/v1/messages" {
				tok = toolCodex.Token
			}
			resp, body := do(t, c, "POST", base+tc.path, tok, string(fixture(t, tc.file)), tc.hdr...)
			wantStatus(t, resp, 200)
			call, text := answerOf(t, tc.path, true, body)
			if tc.tool != "" {
				if call.name != tc.tool || canonJSON(t, call.args) != canonJSON(t, tc.args) || text != "" {
					t.Errorf("call %+v text %q, want %s(%s)", call, text, tc.tool, tc.args)
				}
				return
			}
			if call.name != "" || !strings.Contains(text, tc.quote) || !strings.HasPrefix(text, "Hello from ") {
				t.Errorf("call %+v text %q, want text with %q", call, text, tc.quote)
			}
		})
	}
}

// Each protocol, streamed and not: a shell tool offered and a command asked
// for gives a call; the tool's result gives text quoting it; a tool that is
// no shell gives the usual answer.
func TestScriptEveryProtocol(t *testing.T) {
	_, base := startFleet(t, toolOpenAI, toolCompat, toolCodex, toolAnthropic)
	c := newClient(t)
	const ask = "Run 'echo hi-there' and tell me the output."
	const result = "hi-there\n"
	type proto struct {
		name, path string
		acc        Account
		hdr        []string
		call       string // request asking for the command (%s: stream flag)
		answer     string // request carrying the tool's result
		other      string // request offering a tool that is not a shell
	}
	chatTools := `"tools":[{"type":"function","function":{"name":"shell","parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}}}}}]`
	respTools := `"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}]`
	msgTools := `"tools":[{"name":"Bash","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}]`
	chat := func(acc Account) proto {
		return proto{"chat " + string(acc.Kind), "/v1/chat/completions", acc, nil,
			`{"model":"m",` + chatTools + `,"messages":[{"role":"system","content":"x"},{"role":"user","content":"` + ask + `"}]%s}`,
			`{"model":"m",` + chatTools + `,"messages":[{"role":"user","content":"` + ask + `"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"shell","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"` + strings.ReplaceAll(result, "\n", `\n`) + `"}]%s}`,
			`{"model":"m","tools":[{"type":"function","function":{"name":"get_weather"}}],"messages":[{"role":"user","content":"` + ask + `"}]%s}`}
	}
	protos := []proto{
		chat(toolOpenAI), chat(toolCompat),
		{"responses", "/v1/responses", toolOpenAI, nil,
			`{"model":"m",` + respTools + `,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"` + ask + `"}]}]%s}`,
			`{"model":"m",` + respTools + `,"input":[{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{}"},{"type":"function_call_output","call_id":"call_1","output":[{"type":"input_text","text":"hi-there"}]}]%s}`,
			`{"model":"m","tools":[{"type":"web_search"}],"input":"` + ask + `"%s}`},
		{"codex", "/backend-api/codex/responses", toolCodex, codexHeaders(toolCodex),
			`{"model":"m","store":false,` + respTools + `,"input":"` + ask + `"%s}`,
			`{"model":"m","store":false,` + respTools + `,"input":[{"type":"function_call_output","call_id":"call_1","output":"hi-there"}]%s}`,
			`{"model":"m","store":false,"tools":[],"input":"` + ask + `"%s}`},
		{"messages", "/v1/messages", toolAnthropic, anthropicHeaders(toolAnthropic),
			`{"model":"m","max_tokens":64,` + msgTools + `,"messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>echo nothing</system-reminder>"},{"type":"text","text":"` + ask + `"},{"type":"text","text":"<system-reminder>\nRun 'rm -rf' is not asked</system-reminder>"}]}]%s}`,
			`{"model":"m","max_tokens":64,` + msgTools + `,"messages":[{"role":"user","content":"` + ask + `"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"hi-there"}],"is_error":false}]}]%s}`,
			`{"model":"m","max_tokens":64,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"` + ask + `"}]%s}`},
	}
	wantArgs := map[string]string{
		"chat openai": `{"command":["bash","-lc","echo hi-there"]}`, "chat openai_compat": `{"command":["bash","-lc","echo hi-there"]}`,
		"responses": `{"cmd":"echo hi-there"}`, "codex": `{"cmd":"echo hi-there"}`, "messages": `{"command":"echo hi-there"}`,
	}
	for _, p := range protos {
		for _, stream := range []bool{false, true} {
			if p.name == "codex" && !stream {
				continue // the Codex backend only streams
			}
			flag := ""
			if stream {
				flag = `,"stream":true`
			}
			tok := p.acc.Token
			if p.acc.Kind == KindAnthropic {
				tok = ""
			}
			name := p.name + map[bool]string{false: " json", true: " stream"}[stream]
			t.Run(name, func(t *testing.T) {
				send := func(tmpl string) (toolCall, string) {
					body := strings.Replace(tmpl, "%s", flag, 1)
					resp, b := do(t, c, "POST", base+p.path, tok, body, p.hdr...)
					if resp.StatusCode != 200 {
						t.Fatalf("status %d: %s", resp.StatusCode, b)
					}
					return answerOf(t, p.path, stream, b)
				}
				call, text := send(p.call)
				if call.name == "" || canonJSON(t, call.args) != canonJSON(t, wantArgs[p.name]) || text != "" {
					t.Errorf("call %+v text %q, want args %s", call, text, wantArgs[p.name])
				}
				call, text = send(p.answer)
				if want := ToolResultText(p.acc.Name, result); call.name != "" || text != want {
					t.Errorf("after the result: call %+v text %q, want %q", call, text, want)
				}
				call, text = send(p.other)
				if call.name != "" || text != AnswerText(p.acc.Name, 0) {
					t.Errorf("without a shell tool: call %+v text %q", call, text)
				}
			})
		}
	}
}

// FuzzParseRequest feeds arbitrary bodies to the mock's request reader and
// tool script: no panic, and a scripted tool call always carries a shell
// tool's name (or any name, when tool_choice forced the call) and arguments
// that are one JSON object.
func FuzzParseRequest(f *testing.F) {
	for _, name := range []string{"clients/codex-cli-tool-01.body.json", "clients/codex-cli-tool-02.body.json", "clients/claude-code-tool-01.body.json", "clients/claude-code-tool-02.body.json"} {
		f.Add(fixture(f, name))
	}
	f.Add([]byte(`{"model":"m","tools":[{"name":"bash","input_schema":{"properties":{"command":{"type":"array"}}}}],"messages":[{"role":"user","content":"echo \"\u00e9\\\n"}]}`))
	f.Add([]byte(`{"input":"Run '` + "\xff\xfe" + `'","tools":[{"type":"function","name":"shell"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var r request
		if !parseRequest(body, routeChat, &r) {
			return
		}
		switch sc := r.script; sc.kind {
		case scriptToolCall:
			if !isShellName(sc.tool) && !r.force.forced || !json.Valid([]byte(sc.args)) || sc.args[0] != '{' {
				t.Fatalf("tool call %q %q", sc.tool, sc.args)
			}
		case scriptResult:
			if len(sc.words) > maxResultWords {
				t.Fatalf("%d words quoted", len(sc.words))
			}
		}
	})
}

// The Responses WebSocket follows the script too: a call on the first
// response.create, and on the continuation that carries only the tool's
// output (previous_response_id), the quoted result.
func TestScriptWebSocket(t *testing.T) {
	_, base := startFleet(t, toolOpenAI)
	h := http.Header{"Authorization": {"Bearer " + toolOpenAI.Token}}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	conn, _, err := d.Dial("ws"+strings.TrimPrefix(base, "http")+"/v1/responses", h)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	turn := func(frame string) []map[string]any {
		if err := conn.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
			t.Fatal(err)
		}
		var evs []map[string]any
		for {
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, b, err := conn.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			ev := obj(t, string(b))
			evs = append(evs, ev)
			if ev["type"] == "response.completed" || ev["type"] == "error" {
				return evs
			}
		}
	}
	evs := turn(`{"type":"response.create","model":"m","store":false,"tools":[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}}],"input":"Run 'echo ws-hi' please"}`)
	done := evs[len(evs)-1]
	item, _ := get(done, "response", "output", 0).(map[string]any)
	if get(item, "type") != "function_call" || get(item, "name") != "exec_command" || get(item, "arguments") != `{"cmd":"echo ws-hi"}` {
		t.Fatalf("first turn %v", done)
	}
	evs = turn(`{"type":"response.create","model":"m","store":false,"previous_response_id":"` + get(done, "response", "id").(string) +
		`","input":[{"type":"function_call_output","call_id":"` + get(item, "call_id").(string) + `","output":"ws-hi"}]}`)
	if text := get(evs[len(evs)-1], "response", "output", 0, "content", 0, "text"); text != ToolResultText(toolOpenAI.Name, "ws-hi") {
		t.Errorf("second turn text %v", text)
	}
}

// Each scripted tool call has an id of its own, as the real APIs give
// (call_ or toolu_ and 24 characters): agents match a tool's result to its
// call by that id across a conversation, and the Messages API refuses a
// history whose tool_use ids repeat. The ids were the fleet's id seed and
// the top half of the sequence number, always zero, so every call of a
// fleet's lifetime had the same id (found by sending the same tool request
// twice to troupe demo).
func TestToolCallIDsUnique(t *testing.T) {
	_, base := startFleet(t, toolOpenAI, toolAnthropic)
	c := newClient(t)
	const ask = "Run 'echo hi-there'"
	cases := []struct {
		path, token, body, prefix string
		hdr                       []string
		id                        []any
	}{
		{"/v1/chat/completions", toolOpenAI.Token, `{"model":"m","tools":[{"type":"function","function":{"name":"bash","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}}],"messages":[{"role":"user","content":"` + ask + `"}]}`,
			"call_", nil, []any{"choices", 0, "message", "tool_calls", 0, "id"}},
		{"/v1/responses", toolOpenAI.Token, `{"model":"m","tools":[{"type":"function","name":"bash","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}],"input":"` + ask + `"}`,
			"call_", nil, []any{"output", 0, "call_id"}},
		{"/v1/messages", "", `{"model":"m","max_tokens":64,"tools":[{"name":"Bash","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}}],"messages":[{"role":"user","content":"` + ask + `"}]}`,
			"toolu_", anthropicHeaders(toolAnthropic), []any{"content", 0, "id"}},
	}
	seen := map[string]string{}
	for _, tc := range cases {
		for range 3 {
			resp, b := do(t, c, "POST", base+tc.path, tc.token, tc.body, tc.hdr...)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: status %d: %s", tc.path, resp.StatusCode, b)
			}
			id, _ := get(obj(t, string(b)), tc.id...).(string)
			if !strings.HasPrefix(id, tc.prefix) || len(id) != len(tc.prefix)+24 {
				t.Errorf("%s: id %q, want %s and 24 characters", tc.path, id, tc.prefix)
			}
			if prev, dup := seen[id]; dup {
				t.Errorf("%s: id %q repeats an id of %s", tc.path, id, prev)
			}
			seen[id] = tc.path
		}
	}
}

// A tool_choice that forces a call gets one in every protocol and stream
// mode, as the real APIs answer: "required" (Chat, Responses) and
// Messages {"type":"any"} call the offered tool even on a plain question
// or right after a tool result; a named function (Chat
// {"type":"function","function":{"name"}}, Responses
// {"type":"function","name"}, Messages {"type":"tool","name"}) calls that
// one, not the shell tool the conversation asks for. Before, only the
// shell script called a tool, so a client forcing a call got text.
func TestScriptForcedToolChoice(t *testing.T) {
	_, base := startFleet(t, toolOpenAI, toolCompat, toolCodex, toolAnthropic)
	c := newClient(t)
	type proto struct {
		name, path string
		acc        Account
		hdr        []string
		tools      string // a shell tool, then get_weather
		any, named string // the tool_choice that forces any call, and one naming get_weather
		ask        string // "conversation" holding %s, the user's text
		afterTool  string // a conversation ending in a tool result
	}
	chatTools := `[{"type":"function","function":{"name":"bash","parameters":{"type":"object","properties":{"command":{"type":"string"}}}}},{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]`
	respTools := `[{"type":"function","name":"exec_command","parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}},{"type":"function","name":"get_weather","parameters":{"type":"object"}}]`
	chat := func(acc Account) proto {
		return proto{"chat " + string(acc.Kind), "/v1/chat/completions", acc, nil, chatTools,
			`"required"`, `{"type":"function","function":{"name":"get_weather"}}`,
			`"messages":[{"role":"user","content":"%s"}]`,
			`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"sunny"}]`}
	}
	protos := []proto{
		chat(toolOpenAI), chat(toolCompat),
		{"responses", "/v1/responses", toolOpenAI, nil, respTools, `"required"`, `{"type":"function","name":"get_weather"}`,
			`"input":"%s"`, `"input":[{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{}"},{"type":"function_call_output","call_id":"call_1","output":"sunny"}]`},
		{"codex", "/backend-api/codex/responses", toolCodex, codexHeaders(toolCodex), respTools, `"required"`, `{"type":"function","name":"get_weather"}`,
			`"store":false,"input":"%s"`, `"store":false,"input":[{"type":"function_call_output","call_id":"call_1","output":"sunny"}]`},
		{"messages", "/v1/messages", toolAnthropic, anthropicHeaders(toolAnthropic),
			`[{"name":"Bash","input_schema":{"type":"object","properties":{"command":{"type":"string"}}}},{"name":"get_weather","input_schema":{"type":"object"}}]`,
			`{"type":"any"}`, `{"type":"tool","name":"get_weather"}`,
			`"max_tokens":64,"messages":[{"role":"user","content":"%s"}]`,
			`"max_tokens":64,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]}]`},
	}
	shellArgs := map[string]string{"chat openai": `{"command":"echo hi-there"}`, "chat openai_compat": `{"command":"echo hi-there"}`,
		"responses": `{"cmd":"echo hi-there"}`, "codex": `{"cmd":"echo hi-there"}`, "messages": `{"command":"echo hi-there"}`}
	shellName := map[string]string{"chat openai": "bash", "chat openai_compat": "bash", "responses": "exec_command", "codex": "exec_command", "messages": "Bash"}
	for _, p := range protos {
		for _, stream := range []bool{false, true} {
			if p.name == "codex" && !stream {
				continue // the Codex backend only streams
			}
			tok := p.acc.Token
			if p.acc.Kind == KindAnthropic {
				tok = ""
			}
			t.Run(p.name+map[bool]string{false: " json", true: " stream"}[stream], func(t *testing.T) {
				send := func(choice, conv string) (toolCall, string) {
					t.Helper()
					body := `{"model":"m","tools":` + p.tools + `,"tool_choice":` + choice + `,` + conv
					if stream {
						body += `,"stream":true`
					}
					resp, b := do(t, c, "POST", base+p.path, tok, body+"}", p.hdr...)
					if resp.StatusCode != 200 {
						t.Fatalf("status %d: %s", resp.StatusCode, b)
					}
					return answerOf(t, p.path, stream, b)
				}
				for _, tc := range []struct {
					what, choice, conv, tool, args string
				}{
					{"any, a plain question: the shell tool offered", p.any, strings.Replace(p.ask, "%s", "say hi", 1), shellName[p.name], `{}`},
					{"any, a command asked: the scripted call", p.any, strings.Replace(p.ask, "%s", "Run 'echo hi-there'", 1), shellName[p.name], shellArgs[p.name]},
					{"any, after a tool result: a call again", p.any, p.afterTool, shellName[p.name], `{}`},
					{"named, a command asked: the named tool", p.named, strings.Replace(p.ask, "%s", "Run 'echo hi-there'", 1), "get_weather", `{}`},
					{"named, after a tool result", p.named, p.afterTool, "get_weather", `{}`},
				} {
					call, text := send(tc.choice, tc.conv)
					if call.name != tc.tool || canonJSON(t, call.args) != canonJSON(t, tc.args) || text != "" {
						t.Errorf("%s: call %+v text %q, want %s(%s)", tc.what, call, text, tc.tool, tc.args)
					}
				}
			})
		}
	}
}

// forcedScript without a shell tool calls the first tool offered, and
// without any tool forces nothing (the real APIs refuse such a request).
func TestForcedScriptFirstTool(t *testing.T) {
	tools := gjson.Parse(`[{"type":"web_search"},{"type":"function","function":{"name":"lookup"}},{"name":"other"}]`)
	sc, ok := forcedScript(toolChoice{forced: true}, tools, script{})
	if !ok || sc.kind != scriptToolCall || sc.tool != "lookup" || sc.args != "{}" {
		t.Errorf("required over [web_search, lookup, other]: %+v %v, want lookup({})", sc, ok)
	}
	if sc, ok := forcedScript(toolChoice{forced: true}, gjson.Parse(`[]`), script{}); ok {
		t.Errorf("required with no tools: %+v, want no forced call", sc)
	}
	for choice, want := range map[string]toolChoice{
		`"required"`: {forced: true}, `"auto"`: {}, `"none"`: {}, `{"type":"any"}`: {forced: true}, `{"type":"auto"}`: {},
		`{"type":"tool","name":"x"}`: {true, "x"}, `{"type":"function","name":"x"}`: {true, "x"}, `{"type":"function","function":{"name":"x"}}`: {true, "x"},
	} {
		if got := parseToolChoice(gjson.Parse(choice)); got != want {
			t.Errorf("parseToolChoice(%s) = %+v, want %+v", choice, got, want)
		}
	}
}

// The Responses WebSocket honours a forcing tool_choice too, and the
// response echoes it as the API does ("required", or the named function).
func TestForcedToolChoiceWebSocket(t *testing.T) {
	_, base := startFleet(t, toolOpenAI)
	h := http.Header{"Authorization": {"Bearer " + toolOpenAI.Token}}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second}
	conn, _, err := d.Dial("ws"+strings.TrimPrefix(base, "http")+"/v1/responses", h)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tools := `[{"type":"function","name":"lookup","parameters":{"type":"object"}},{"type":"function","name":"get_weather","parameters":{"type":"object"}}]`
	for choice, want := range map[string]string{`"required"`: "lookup", `{"type":"function","name":"get_weather"}`: "get_weather"} {
		frame := `{"type":"response.create","model":"m","store":false,"tools":` + tools + `,"tool_choice":` + choice + `,"input":"say hi"}`
		if err := conn.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
			t.Fatal(err)
		}
		var done map[string]any
		for done == nil {
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, b, err := conn.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			if ev := obj(t, string(b)); ev["type"] == "response.completed" || ev["type"] == "error" {
				done = ev
			}
		}
		item, _ := get(done, "response", "output", 0).(map[string]any)
		if get(item, "type") != "function_call" || get(item, "name") != want || get(item, "arguments") != "{}" {
			t.Errorf("tool_choice %s: %v, want a call to %s", choice, done, want)
		}
		if got := mustJSON(t, get(done, "response", "tool_choice")); got != canonJSON(t, choice) {
			t.Errorf("tool_choice %s echoed as %s", choice, got)
		}
	}
}
