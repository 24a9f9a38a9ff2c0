package mock

import (
	"strings"

	"github.com/tidwall/gjson"
)

// Scripted tool turns, so that real clients (Codex CLI, Claude Code, the
// SDKs) can run a tool through the fleet in every protocol:
//
//   - When the request offers a shell-like tool (ShellToolNames) and the last
//     user turn asks to run a command, the answer is a call to that tool
//     (Chat tool_calls, a Responses function_call item, a Messages tool_use
//     block) with the command as its argument (ScriptedCommand says which).
//   - When the last input is a tool result (Chat role "tool", Responses
//     function_call_output or custom_tool_call_output, a Messages
//     tool_result block), the answer is text quoting the result (see
//     ToolResultText).
//
//   - When tool_choice forces a call (forcedScript) — "required" (Chat,
//     Responses), a named function (Chat {"type":"function","function":
//     {"name"}}, Responses {"type":"function","name"}), Messages
//     {"type":"any"} or {"type":"tool","name"} — the answer is a call, as
//     the real APIs answer: to the named tool, else to the offered shell
//     tool, else to the first tool offered.
//
// Everything else gets the account's usual AnswerText. The decision reads
// only the request, so it is deterministic.

// ShellToolNames are the tool names (compared case-insensitively) the fleet
// treats as a shell: Codex CLI's exec_command, Claude Code's Bash, and the
// usual names of other agents' shell tools.
var ShellToolNames = []string{"exec_command", "bash", "shell", "shell_command", "local_shell", "run_shell_command", "execute_command", "run_command", "terminal", "exec"}

// maxResultWords bounds how many words of a tool result an answer quotes.
const maxResultWords = 200

// scriptKind is what a scripted turn answers.
type scriptKind uint8

const (
	scriptNone     scriptKind = iota // the account's usual answer
	scriptToolCall                   // a call to the offered shell tool
	scriptResult                     // text quoting the last tool result
)

// script is the scripted turn of one request. All strings are owned (not
// aliases of the request body).
type script struct {
	kind scriptKind
	tool string // scriptToolCall: the tool's name
	args string // scriptToolCall: the arguments, a JSON object (not escaped)
	// scriptResult: the result's words, JSON-escaped (without quotes).
	words []string
}

// resultPrefix are the words between the greeting and the quoted result:
// "Hello from NAME. The tool returned: <result…>".
var resultPrefix = [...]string{"The", "tool", "returned:"}

// ToolResultText returns the exact text an account named name answers when
// the last input of a request is a tool result with the given text: "Hello
// from NAME. The tool returned: " followed by the result's words (at most
// 200; <system-reminder> notes left out) separated by single spaces.
func ToolResultText(name, result string) string {
	ws := strings.Fields(stripReminders(result))
	if len(ws) > maxResultWords {
		ws = ws[:maxResultWords]
	}
	return "Hello from " + name + ". " + strings.Join(resultPrefix[:], " ") + " " + strings.Join(ws, " ")
}

// ScriptedCommand returns the command a user text asks to run, and whether
// it asks: the first quoted command after the word "Run" ('…', "…" or
// `…`; in any case), else an "echo …" up to the end of its line (a trailing
// period dropped).
func ScriptedCommand(text string) (string, bool) {
	lower := strings.ToLower(text)
	for i := 0; ; {
		j := strings.Index(lower[i:], "run ")
		if j < 0 {
			break
		}
		k := i + j + len("run ")
		wordStart := i+j == 0 || !isWordByte(lower[i+j-1])
		if wordStart && k < len(text) && strings.IndexByte("'\"`", text[k]) >= 0 {
			if end := strings.IndexByte(text[k+1:], text[k]); end > 0 {
				return text[k+1 : k+1+end], true
			}
		}
		i = k
	}
	i := strings.Index(lower, "echo ")
	if i < 0 || (i > 0 && isWordByte(lower[i-1])) {
		return "", false
	}
	cmd := text[i:]
	if nl := strings.IndexAny(cmd, "\r\n"); nl >= 0 {
		cmd = cmd[:nl]
	}
	cmd = strings.TrimSuffix(strings.TrimSpace(cmd), ".")
	return cmd, true
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
}

// parseScript decides the scripted turn of a request from its "tools" and
// its conversation ("messages" for Chat and Messages, "input" for
// Responses); any of them may be missing (zero Results).
func parseScript(tools, conv gjson.Result) script {
	last, ok := lastTurn(conv)
	if !ok {
		return script{}
	}
	if res, ok := toolResult(last); ok {
		return resultScript(res)
	}
	if !tools.IsArray() || !isUserTurn(last) {
		return script{}
	}
	cmd, ok := ScriptedCommand(lastText(last))
	if !ok {
		return script{}
	}
	name, key, array := shellTool(tools)
	if name == "" {
		return script{}
	}
	args := make([]byte, 0, len(cmd)+32)
	args = append(args, '{')
	args = appendJSONString(args, key)
	args = append(args, ':')
	if array { // Codex's older "shell" tool takes argv
		args = append(args, `["bash","-lc",`...)
		args = appendJSONString(args, cmd)
		args = append(args, ']')
	} else {
		args = appendJSONString(args, cmd)
	}
	args = append(args, '}')
	return script{kind: scriptToolCall, tool: name, args: string(args)}
}

func resultScript(res string) script {
	ws := strings.Fields(stripReminders(res))
	if len(ws) > maxResultWords {
		ws = ws[:maxResultWords]
	}
	sc := script{kind: scriptResult, words: make([]string, len(ws))}
	for i, w := range ws {
		sc.words[i] = string(appendJSONStringBody(nil, w))
	}
	return sc
}

// lastTurn returns the conversation's last item that is not a system or
// developer message (Claude Code puts a role "system" message after the
// user's). A string conversation (Responses "input": "…") is a user turn.
func lastTurn(conv gjson.Result) (gjson.Result, bool) {
	if conv.Type == gjson.String {
		return conv, true
	}
	if !conv.IsArray() {
		return gjson.Result{}, false
	}
	items := conv.Array()
	for i := len(items) - 1; i >= 0; i-- {
		switch items[i].Get("role").Str {
		case "system", "developer":
			continue
		}
		return items[i], true
	}
	return gjson.Result{}, false
}

func isUserTurn(it gjson.Result) bool {
	return it.Type == gjson.String || it.Get("role").Str == "user"
}

// toolResult returns the text of a tool result turn: a Chat role "tool"
// message, a Responses function_call_output or custom_tool_call_output
// item, or a Messages user message with a tool_result block (the last one).
func toolResult(it gjson.Result) (string, bool) {
	if it.Type == gjson.String {
		return "", false
	}
	switch it.Get("type").Str {
	case "function_call_output", "custom_tool_call_output":
		return partsText(it.Get("output")), true
	}
	switch it.Get("role").Str {
	case "tool":
		return partsText(it.Get("content")), true
	case "user":
		c := it.Get("content")
		if !c.IsArray() {
			return "", false
		}
		blocks := c.Array()
		for i := len(blocks) - 1; i >= 0; i-- {
			if blocks[i].Get("type").Str == "tool_result" {
				return partsText(blocks[i].Get("content")), true
			}
		}
	}
	return "", false
}

// partsText returns a content value's text: the string itself, or the text
// of its parts ({"type":"text"|"input_text"|"output_text","text"}) joined
// by newlines.
func partsText(v gjson.Result) string {
	if v.Type == gjson.String {
		return v.Str
	}
	var b strings.Builder
	v.ForEach(func(_, p gjson.Result) bool {
		if t := p.Get("text"); t.Type == gjson.String {
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(t.Str)
		}
		return true
	})
	return b.String()
}

// lastText returns the text of a user turn's last text part that is not a
// <system-reminder> note (Claude Code sends those around the prompt), or the
// whole string.
func lastText(it gjson.Result) string {
	if it.Type == gjson.String {
		return it.Str
	}
	c := it.Get("content")
	if c.Type == gjson.String {
		return c.Str
	}
	parts := c.Array()
	for i := len(parts) - 1; i >= 0; i-- {
		if t := parts[i].Get("text"); t.Type == gjson.String && !strings.HasPrefix(strings.TrimSpace(t.Str), "<system-reminder>") {
			return t.Str
		}
	}
	return ""
}

// shellTool finds the first offered shell-like tool (Chat {"type":
// "function","function":{name,parameters}}, Responses {"type":"function",
// name, parameters}, Messages {name, input_schema}) and returns its name,
// the argument key for the command ("cmd" when its schema has it and no
// "command", else "command") and whether that argument is an array.
func shellTool(tools gjson.Result) (name, key string, array bool) {
	tools.ForEach(func(_, t gjson.Result) bool {
		fn := t
		if f := t.Get("function"); f.IsObject() {
			fn = f
		}
		n := fn.Get("name").Str
		if !isShellName(n) {
			return true
		}
		schema := fn.Get("parameters")
		if !schema.IsObject() {
			schema = t.Get("input_schema")
		}
		props := schema.Get("properties")
		key = "command"
		if !props.Get("command").Exists() && props.Get("cmd").Exists() {
			key = "cmd"
		}
		array = props.Get(key).Get("type").Str == "array"
		name = strings.Clone(n)
		return false
	})
	return name, key, array
}

func isShellName(n string) bool {
	for _, s := range ShellToolNames {
		if strings.EqualFold(n, s) {
			return true
		}
	}
	return false
}

// stripReminders removes the <system-reminder>…</system-reminder> notes
// Claude Code appends to tool results: they are the client's, not the
// tool's output. An unclosed note runs to the end.
func stripReminders(s string) string {
	const open, end = "<system-reminder>", "</system-reminder>"
	for {
		i := strings.Index(s, open)
		if i < 0 {
			return s
		}
		j := strings.Index(s[i:], end)
		if j < 0 {
			return s[:i]
		}
		s = s[:i] + " " + s[i+j+len(end):]
	}
}

// toolChoice is what a request's tool_choice asks for, beyond "none".
type toolChoice struct {
	forced bool   // a call is required
	name   string // the tool it must call; "" for any
}

// parseToolChoice reads tool_choice in any protocol's shape: Chat and
// Responses "required", Chat {"type":"function","function":{"name"}},
// Responses {"type":"function","name"}, Messages {"type":"any"} and
// {"type":"tool","name"}. "auto", "none" and anything else force nothing.
func parseToolChoice(v gjson.Result) toolChoice {
	if v.Type == gjson.String {
		return toolChoice{forced: v.Str == "required"}
	}
	switch v.Get("type").Str {
	case "any":
		return toolChoice{forced: true}
	case "tool":
		return toolChoice{forced: true, name: strings.Clone(v.Get("name").Str)}
	case "function":
		n := v.Get("function.name")
		if n.Type != gjson.String {
			n = v.Get("name")
		}
		return toolChoice{forced: true, name: strings.Clone(n.Str)}
	}
	return toolChoice{}
}

// forcedScript returns the call a forcing tool_choice makes the answer:
// the named tool (with the shell arguments of the scripted call when it is
// that tool, else {}), else the scripted shell call when there is one,
// else a call to the offered shell tool or, failing that, to the first tool
// offered, with arguments {}. ok is false when no tool is offered (the real
// APIs refuse such a request; the mock answers as without tool_choice).
func forcedScript(tc toolChoice, tools gjson.Result, scripted script) (sc script, ok bool) {
	if tc.name != "" {
		if scripted.kind == scriptToolCall && scripted.tool == tc.name {
			return scripted, true
		}
		return script{kind: scriptToolCall, tool: tc.name, args: "{}"}, true
	}
	if scripted.kind == scriptToolCall {
		return scripted, true
	}
	name, _, _ := shellTool(tools)
	if name == "" {
		name = firstToolName(tools)
	}
	if name == "" {
		return script{}, false
	}
	return script{kind: scriptToolCall, tool: name, args: "{}"}, true
}

// firstToolName returns the name of the first offered tool that has one
// (Chat's function.name, else name); "" when none does.
func firstToolName(tools gjson.Result) string {
	var name string
	tools.ForEach(func(_, t gjson.Result) bool {
		n := t.Get("function.name")
		if n.Type != gjson.String {
			n = t.Get("name")
		}
		if n.Type == gjson.String && n.Str != "" {
			name = strings.Clone(n.Str)
			return false
		}
		return true
	})
	return name
}
