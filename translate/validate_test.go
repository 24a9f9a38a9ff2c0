package translate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/tidwall/gjson"
)

// Validators: each reads a client stream by its own protocol's rules, as
// strictly as the strictest real client (the official SDKs' accumulators,
// Claude Code, the Codex CLI), and returns what a client learns from it.
// The rules come from the protocol references and the recorded streams in
// testdata/ (see /work/shared/fixtures README "Protocol notes"):
//   - Chat: data-only chunks of one id, the first with role, tool calls
//     joined by index whose first fragment carries a unique non-empty id and
//     a name, one finish_reason, the usage chunk when asked, then [DONE].
//   - Responses: event name = type, sequence_number 0, 1, 2 …; items added
//     at output_index 0, 1, 2 … with unique ids, every event naming an
//     added and not yet done item, .done texts equal to the deltas, every
//     item done before one terminal event, whose output lists the done
//     items and whose usage is present.
//   - Messages: event name = type; message_start first; blocks one at a
//     time at index 0, 1, 2 …, deltas of the block's own kind, at most one
//     non-empty signature_delta per thinking block, every block stopped
//     before message_delta (stop_reason, usage) and message_stop; or an
//     error event, after which nothing comes.
// Common to all: tool ids unique and non-empty, names non-empty, arguments
// valid JSON (when strictArgs), usage present on a successful end.

// clientDigest is what a client learned from a stream.
type clientDigest struct {
	Text       string
	Reasoning  string
	Refusal    string
	Tools      []clientTool
	Signatures []string // reasoning state: Messages signatures, Responses encrypted_content
	Finish     string   // stop, length, tool_calls, content_filter (the client's own name mapped to these)
	In, Out    int64
	Cached     int64
	HasUsage   bool
	Error      bool
	ErrorCode  string
}

type clientTool struct{ ID, Name, Args string }

// validateOpts tunes a validation.
type validateOpts struct {
	// strictArgs: every tool call's arguments must be valid JSON (true when
	// the upstream's were).
	strictArgs bool
	// usageChunk: a Chat client asked for include_usage.
	usageChunk bool
	// loose: check the stream's structure only, not what the upstream
	// controls (tool ids and names, the finish reason matching the calls):
	// for streams translated from arbitrary upstream bytes.
	loose bool
}

// sseEvents splits a client stream into events.
func sseEvents(out []byte) ([]Event, error) {
	sc := NewScanner(bytes.NewReader(out), 0)
	var evs []Event
	for {
		ev, err := sc.Next()
		if err == io.EOF {
			return evs, nil
		}
		if err != nil {
			return nil, err
		}
		evs = append(evs, Event{Name: bytes.Clone(ev.Name), Data: bytes.Clone(ev.Data)})
	}
}

// validateStream validates out as a stream of protocol p.
func validateStream(p Protocol, out []byte, o validateOpts) (clientDigest, error) {
	evs, err := sseEvents(out)
	if err != nil {
		return clientDigest{}, err
	}
	switch p {
	case Chat:
		return validateChat(evs, o)
	case Responses:
		return validateResponses(evs, o)
	default:
		return validateMessages(evs, o)
	}
}

// namedEvent parses event i of a Responses or Messages stream, whose data
// must be JSON with a "type" equal to the event's name.
func namedEvent(i int, ev Event) (gjson.Result, string, error) {
	if !gjson.ValidBytes(ev.Data) {
		return gjson.Result{}, "", fmt.Errorf("event %d is not JSON: %s", i, ev.Data)
	}
	x := gjson.ParseBytes(ev.Data)
	typ := x.Get("type").Str
	if typ != string(ev.Name) {
		return x, typ, fmt.Errorf("event %q has type %q", ev.Name, typ)
	}
	return x, typ, nil
}

// checkTools checks ids, names and arguments of the calls a client saw.
func checkTools(d *clientDigest, o validateOpts) error {
	if o.loose {
		return nil
	}
	seen := map[string]bool{}
	for _, t := range d.Tools {
		if t.ID == "" || t.Name == "" {
			return fmt.Errorf("tool call with id %q name %q", t.ID, t.Name)
		}
		if seen[t.ID] {
			return fmt.Errorf("tool id %q used twice", t.ID)
		}
		seen[t.ID] = true
		if o.strictArgs && !json.Valid([]byte(t.Args)) {
			return fmt.Errorf("tool %s (%s) arguments are not JSON: %q", t.ID, t.Name, t.Args)
		}
	}
	return nil
}

func validateChat(evs []Event, o validateOpts) (clientDigest, error) {
	var d clientDigest
	type call struct {
		id, name string
		args     strings.Builder
	}
	var calls []*call
	byIndex := map[int64]*call{}
	var id string
	done, finished, usageSeen := false, false, false
	for i, ev := range evs {
		if done {
			return d, fmt.Errorf("event after [DONE]: %s", ev.Data)
		}
		if len(ev.Name) != 0 {
			return d, fmt.Errorf("chat stream has an event name %q", ev.Name)
		}
		if string(ev.Data) == "[DONE]" {
			done = true
			continue
		}
		if !gjson.ValidBytes(ev.Data) {
			return d, fmt.Errorf("chunk %d is not JSON: %s", i, ev.Data)
		}
		c := gjson.ParseBytes(ev.Data)
		if c.Get("error").Exists() {
			if c.Get("error.message").Str == "" {
				return d, fmt.Errorf("error chunk without a message: %s", ev.Data)
			}
			d.Error, d.ErrorCode = true, c.Get("error.code").Str
			continue
		}
		if d.Error {
			return d, fmt.Errorf("chunk after an error chunk: %s", ev.Data)
		}
		if c.Get("object").Str != "chat.completion.chunk" {
			return d, fmt.Errorf("chunk object %q", c.Get("object").Str)
		}
		if id == "" {
			id = c.Get("id").Str
			if id == "" {
				return d, fmt.Errorf("chunk without id")
			}
		} else if c.Get("id").Str != id {
			return d, fmt.Errorf("chunk id %q after %q", c.Get("id").Str, id)
		}
		ch := c.Get("choices")
		if len(ch.Array()) == 0 {
			if !finished {
				return d, fmt.Errorf("usage chunk before finish_reason")
			}
			u := c.Get("usage")
			if !u.IsObject() {
				return d, fmt.Errorf("chunk without choices or usage: %s", ev.Data)
			}
			usageSeen = true
			d.HasUsage = true
			d.In, d.Out, d.Cached = u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int(), u.Get("prompt_tokens_details.cached_tokens").Int()
			continue
		}
		if finished {
			return d, fmt.Errorf("choice chunk after finish_reason: %s", ev.Data)
		}
		c0 := ch.Get("0")
		if c0.Get("index").Int() != 0 {
			return d, fmt.Errorf("choice index %d", c0.Get("index").Int())
		}
		delta := c0.Get("delta")
		if i == 0 && delta.Get("role").Str != "assistant" {
			return d, fmt.Errorf("first chunk has no role: %s", ev.Data)
		}
		d.Text += delta.Get("content").Str
		d.Reasoning += delta.Get("reasoning_content").Str
		d.Refusal += delta.Get("refusal").Str
		var err error
		delta.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
			if !tc.Get("index").Exists() {
				err = fmt.Errorf("tool call fragment without index: %s", tc.Raw)
				return false
			}
			idx := tc.Get("index").Int()
			cl := byIndex[idx]
			if cl == nil {
				if idx != int64(len(calls)) {
					err = fmt.Errorf("tool call index %d after %d calls", idx, len(calls))
					return false
				}
				if tc.Get("type").Str != "function" {
					err = fmt.Errorf("first fragment of call %d has type %q", idx, tc.Get("type").Str)
					return false
				}
				cl = &call{id: tc.Get("id").Str, name: tc.Get("function.name").Str}
				byIndex[idx] = cl
				calls = append(calls, cl)
			} else if x := tc.Get("id").Str; x != "" && x != cl.id {
				err = fmt.Errorf("tool call %d changes its id from %q to %q", idx, cl.id, x)
				return false
			}
			cl.args.WriteString(tc.Get("function.arguments").Str)
			return true
		})
		if err != nil {
			return d, err
		}
		if fr := c0.Get("finish_reason"); fr.Type == gjson.String {
			finished = true
			d.Finish = fr.Str
		}
	}
	if !done {
		return d, fmt.Errorf("chat stream does not end in [DONE]")
	}
	for _, cl := range calls {
		d.Tools = append(d.Tools, clientTool{cl.id, cl.name, cl.args.String()})
	}
	if d.Error {
		o.strictArgs = false // Chat has no end of a call: a failed stream may cut one short
		return d, checkTools(&d, o)
	}
	if !finished {
		return d, fmt.Errorf("chat stream without finish_reason")
	}
	if len(calls) > 0 && d.Finish != "tool_calls" && d.Finish != "length" && !o.loose {
		return d, fmt.Errorf("tool calls but finish_reason %q", d.Finish)
	}
	if o.usageChunk && !usageSeen {
		return d, fmt.Errorf("no usage chunk")
	}
	return d, checkTools(&d, o)
}

func validateResponses(evs []Event, o validateOpts) (clientDigest, error) {
	var d clientDigest
	type item struct {
		id, typ  string
		raw      gjson.Result // the .done item
		parts    map[int64]*strings.Builder
		partDone map[int64]bool
		args     strings.Builder
		summary  strings.Builder
		done     bool
	}
	var items []*item
	var respID string
	terminal, sawError := false, false
	for i, ev := range evs {
		if terminal {
			return d, fmt.Errorf("event after the terminal event: %s", ev.Name)
		}
		x, typ, err := namedEvent(i, ev)
		if err != nil {
			return d, err
		}
		if sn := x.Get("sequence_number"); sn.Type != gjson.Number || sn.Int() != int64(i) {
			return d, fmt.Errorf("event %d (%s) has sequence_number %s", i, typ, sn.Raw)
		}
		if i == 0 && typ != "response.created" && typ != "error" {
			return d, fmt.Errorf("first event %s", typ)
		}
		if sawError && typ != "response.failed" {
			return d, fmt.Errorf("%s after error", typ)
		}
		var it *item
		if oi := x.Get("output_index"); oi.Exists() && typ != "response.output_item.added" {
			n := oi.Int()
			if n < 0 || n >= int64(len(items)) {
				return d, fmt.Errorf("%s names output_index %d of %d items", typ, n, len(items))
			}
			it = items[n]
			if it.done {
				return d, fmt.Errorf("%s for item %d after its output_item.done", typ, n)
			}
			if iid := x.Get("item_id"); iid.Exists() && iid.Str != it.id {
				return d, fmt.Errorf("%s: item_id %q, item %d is %q", typ, iid.Str, n, it.id)
			}
		}
		switch typ {
		case "response.created", "response.in_progress":
			r := x.Get("response")
			if respID == "" {
				respID = r.Get("id").Str
			}
			if r.Get("id").Str != respID || respID == "" {
				return d, fmt.Errorf("%s response id %q", typ, r.Get("id").Str)
			}
		case "response.output_item.added":
			if n := x.Get("output_index").Int(); n != int64(len(items)) {
				return d, fmt.Errorf("item added at output_index %d after %d items", n, len(items))
			}
			ni := &item{id: x.Get("item.id").Str, typ: x.Get("item.type").Str, parts: map[int64]*strings.Builder{}, partDone: map[int64]bool{}}
			if ni.id == "" {
				return d, fmt.Errorf("item without id: %s", ev.Data)
			}
			for _, p := range items {
				if p.id == ni.id {
					return d, fmt.Errorf("item id %q used twice", ni.id)
				}
			}
			items = append(items, ni)
		case "response.content_part.added":
			ci := x.Get("content_index").Int()
			if it == nil || it.typ != "message" || it.parts[ci] != nil {
				return d, fmt.Errorf("content_part.added not for a new part of a message: %s", ev.Data)
			}
			it.parts[ci] = &strings.Builder{}
		case "response.output_text.delta", "response.refusal.delta":
			ci := x.Get("content_index").Int()
			if it == nil || it.parts[ci] == nil || it.partDone[ci] {
				return d, fmt.Errorf("%s for no open part: %s", typ, ev.Data)
			}
			it.parts[ci].WriteString(x.Get("delta").Str)
		case "response.output_text.done", "response.refusal.done":
			ci := x.Get("content_index").Int()
			if it == nil || it.parts[ci] == nil {
				return d, fmt.Errorf("%s for no part", typ)
			}
			field := "text"
			if typ == "response.refusal.done" {
				field = "refusal"
			}
			if got := x.Get(field).Str; got != it.parts[ci].String() {
				return d, fmt.Errorf("%s %q differs from its deltas %q", typ, got, it.parts[ci].String())
			}
		case "response.content_part.done":
			ci := x.Get("content_index").Int()
			if it == nil || it.parts[ci] == nil || it.partDone[ci] {
				return d, fmt.Errorf("content_part.done for no open part")
			}
			it.partDone[ci] = true
		case "response.function_call_arguments.delta", "response.custom_tool_call_input.delta":
			if it == nil || (it.typ != "function_call" && it.typ != "custom_tool_call") {
				return d, fmt.Errorf("%s for no call", typ)
			}
			it.args.WriteString(x.Get("delta").Str)
		case "response.function_call_arguments.done":
			if it == nil || it.typ != "function_call" || x.Get("arguments").Str != it.args.String() {
				return d, fmt.Errorf("%s differs from the deltas %q: %s", typ, it.args.String(), ev.Data)
			}
		case "response.custom_tool_call_input.done":
			if it == nil || it.typ != "custom_tool_call" || x.Get("input").Str != it.args.String() {
				return d, fmt.Errorf("%s differs from the deltas: %s", typ, ev.Data)
			}
		case "response.reasoning_summary_part.added", "response.reasoning_summary_part.done", "response.reasoning_summary_text.done":
			if it == nil || it.typ != "reasoning" {
				return d, fmt.Errorf("%s for no reasoning item", typ)
			}
		case "response.reasoning_summary_text.delta":
			if it == nil || it.typ != "reasoning" {
				return d, fmt.Errorf("%s for no reasoning item", typ)
			}
			it.summary.WriteString(x.Get("delta").Str)
		case "response.output_item.done":
			di := x.Get("item")
			if it == nil || di.Get("id").Str != it.id || di.Get("type").Str != it.typ {
				return d, fmt.Errorf("output_item.done does not match its item: %s", ev.Data)
			}
			for ci := range it.parts {
				if !it.partDone[ci] {
					return d, fmt.Errorf("message %s done with part %d open", it.id, ci)
				}
			}
			switch it.typ {
			case "function_call":
				if di.Get("arguments").Str != it.args.String() {
					return d, fmt.Errorf("done call arguments %q differ from the deltas %q", di.Get("arguments").Str, it.args.String())
				}
			case "message":
				var sb strings.Builder
				di.Get("content").ForEach(func(_, c gjson.Result) bool {
					sb.WriteString(c.Get("text").Str + c.Get("refusal").Str)
					return true
				})
				var deltas strings.Builder
				for ci := int64(0); ci < int64(len(it.parts)); ci++ {
					if it.parts[ci] != nil {
						deltas.WriteString(it.parts[ci].String())
					}
				}
				if sb.String() != deltas.String() {
					return d, fmt.Errorf("done message text %q differs from the deltas %q", sb.String(), deltas.String())
				}
			}
			it.raw, it.done = di, true
		case "error":
			sawError = true
			if x.Get("message").Str == "" && x.Get("error.message").Str == "" {
				return d, fmt.Errorf("error event without a message: %s", ev.Data)
			}
		case "response.completed", "response.incomplete", "response.failed":
			terminal = true
			r := x.Get("response")
			if respID != "" && r.Get("id").Str != respID {
				return d, fmt.Errorf("%s response id %q, created %q", typ, r.Get("id").Str, respID)
			}
			if typ == "response.failed" {
				d.Error, d.ErrorCode = true, r.Get("error.code").Str
				if r.Get("error.message").Str == "" {
					return d, fmt.Errorf("response.failed without error.message")
				}
				// An item the failure cut (never done) is "incomplete",
				// as a cut answer's last item; a done one as it was done.
				for n, o := range r.Get("output").Array() {
					want := "incomplete"
					if n < len(items) && items[n].done {
						want = items[n].raw.Get("status").Str
					}
					if st := o.Get("status"); st.Exists() && st.Str != want {
						return d, fmt.Errorf("response.failed: output item %d has status %q, want %q", n, st.Str, want)
					}
				}
				break
			}
			out := r.Get("output").Array()
			if len(out) != len(items) {
				return d, fmt.Errorf("%s output has %d items, %d were streamed", typ, len(out), len(items))
			}
			for n, it := range items {
				if !it.done {
					return d, fmt.Errorf("item %d (%s) never done", n, it.id)
				}
				if out[n].Raw != it.raw.Raw {
					return d, fmt.Errorf("%s output item %d\n%s\ndiffers from its output_item.done\n%s", typ, n, out[n].Raw, it.raw.Raw)
				}
				// OpenAI marks the item an incomplete answer was cut in
				// "incomplete", every other one "completed" (reasoning
				// items carry no status).
				want := "completed"
				if typ == "response.incomplete" && n == len(items)-1 {
					want = "incomplete"
				}
				if st := it.raw.Get("status"); st.Exists() && st.Str != want {
					return d, fmt.Errorf("%s: item %d (%s) has status %q, want %q", typ, n, it.typ, st.Str, want)
				}
			}
			u := r.Get("usage")
			if !u.IsObject() {
				return d, fmt.Errorf("%s without usage", typ)
			}
			d.HasUsage = true
			d.In, d.Out, d.Cached = u.Get("input_tokens").Int(), u.Get("output_tokens").Int(), u.Get("input_tokens_details.cached_tokens").Int()
			switch {
			case typ == "response.incomplete" && r.Get("incomplete_details.reason").Str == "content_filter":
				d.Finish = "content_filter"
			case typ == "response.incomplete":
				d.Finish = "length"
			default:
				d.Finish = "stop"
			}
		default:
			return d, fmt.Errorf("unknown event %s", typ)
		}
	}
	if !terminal {
		return d, fmt.Errorf("responses stream without a terminal event")
	}
	for _, it := range items {
		if !it.done {
			continue // the stream failed before its end
		}
		switch it.typ {
		case "message":
			it.raw.Get("content").ForEach(func(_, c gjson.Result) bool {
				d.Text += c.Get("text").Str
				d.Refusal += c.Get("refusal").Str
				return true
			})
		case "function_call":
			d.Tools = append(d.Tools, clientTool{it.raw.Get("call_id").Str, it.raw.Get("name").Str, it.raw.Get("arguments").Str})
		case "custom_tool_call":
			in, _ := json.Marshal(map[string]string{"input": it.raw.Get("input").Str})
			d.Tools = append(d.Tools, clientTool{it.raw.Get("call_id").Str, it.raw.Get("name").Str, string(in)})
		case "reasoning":
			d.Reasoning += it.summary.String()
			if enc := it.raw.Get("encrypted_content").Str; enc != "" {
				d.Signatures = append(d.Signatures, enc)
			}
		}
	}
	if len(d.Tools) > 0 && d.Finish == "stop" {
		d.Finish = "tool_calls"
	}
	return d, checkTools(&d, o)
}

func validateMessages(evs []Event, o validateOpts) (clientDigest, error) {
	var d clientDigest
	next := int64(0)
	open := int64(-1)
	var kind string
	var sig int
	var args strings.Builder
	var cur clientTool
	started, delta, stopped := false, false, false
	for i, ev := range evs {
		if stopped || d.Error {
			return d, fmt.Errorf("event after the end: %s", ev.Name)
		}
		x, typ, err := namedEvent(i, ev)
		if err != nil {
			return d, err
		}
		if !started && typ != "message_start" && typ != "error" && typ != "ping" {
			return d, fmt.Errorf("%s before message_start", typ)
		}
		if delta && typ != "message_stop" && typ != "ping" && typ != "error" {
			return d, fmt.Errorf("%s after message_delta", typ)
		}
		switch typ {
		case "ping":
		case "message_start":
			if started {
				return d, fmt.Errorf("second message_start")
			}
			started = true
			m := x.Get("message")
			if m.Get("id").Str == "" || !m.Get("usage").IsObject() || m.Get("role").Str != "assistant" {
				return d, fmt.Errorf("message_start lacks id, role or usage: %s", ev.Data)
			}
		case "content_block_start":
			if open >= 0 {
				return d, fmt.Errorf("block %d starts while block %d is open", x.Get("index").Int(), open)
			}
			if idx := x.Get("index").Int(); idx != next {
				return d, fmt.Errorf("block index %d, want %d", idx, next)
			}
			open, kind, sig = next, x.Get("content_block.type").Str, 0
			args.Reset()
			cb := x.Get("content_block")
			switch kind {
			case "text":
				d.Text += cb.Get("text").Str
			case "thinking":
			case "redacted_thinking":
				if cb.Get("data").Str == "" {
					return d, fmt.Errorf("redacted_thinking without data")
				}
				d.Signatures = append(d.Signatures, cb.Get("data").Str)
			case "tool_use":
				cur = clientTool{ID: cb.Get("id").Str, Name: cb.Get("name").Str}
				if in := cb.Get("input"); !in.IsObject() || in.Raw != "{}" {
					return d, fmt.Errorf("tool_use starts with input %s", in.Raw)
				}
			default:
				return d, fmt.Errorf("block type %q", kind)
			}
		case "content_block_delta":
			if idx := x.Get("index").Int(); idx != open || open < 0 {
				return d, fmt.Errorf("delta for block %d, open %d", idx, open)
			}
			dl := x.Get("delta")
			want := map[string]string{"text": "text_delta", "tool_use": "input_json_delta", "thinking": "thinking_delta"}[kind]
			dt := dl.Get("type").Str
			switch {
			case dt == want:
			case kind == "thinking" && dt == "signature_delta":
				if sig++; sig > 1 {
					return d, fmt.Errorf("second signature_delta in block %d", open)
				}
				if dl.Get("signature").Str == "" {
					return d, fmt.Errorf("empty signature_delta in block %d", open)
				}
				d.Signatures = append(d.Signatures, dl.Get("signature").Str)
				continue
			default:
				return d, fmt.Errorf("%s in a %s block", dt, kind)
			}
			if kind == "thinking" && sig > 0 {
				return d, fmt.Errorf("thinking_delta after the signature")
			}
			switch dt {
			case "text_delta":
				d.Text += dl.Get("text").Str
			case "thinking_delta":
				d.Reasoning += dl.Get("thinking").Str
			case "input_json_delta":
				args.WriteString(dl.Get("partial_json").Str)
			}
		case "content_block_stop":
			if idx := x.Get("index").Int(); idx != open || open < 0 {
				return d, fmt.Errorf("stop for block %d, open %d", idx, open)
			}
			if kind == "tool_use" {
				cur.Args = args.String()
				if cur.Args == "" {
					cur.Args = "{}"
				}
				d.Tools = append(d.Tools, cur)
			}
			open = -1
			next++
		case "message_delta":
			if open >= 0 {
				return d, fmt.Errorf("message_delta while block %d is open", open)
			}
			delta = true
			sr := x.Get("delta.stop_reason").Str
			d.Finish = map[string]string{"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls", "refusal": "content_filter"}[sr]
			if d.Finish == "" {
				return d, fmt.Errorf("stop_reason %q", sr)
			}
			u := x.Get("usage")
			if !u.IsObject() || !u.Get("output_tokens").Exists() {
				return d, fmt.Errorf("message_delta without usage")
			}
			d.HasUsage = true
			d.Cached = u.Get("cache_read_input_tokens").Int()
			d.In = u.Get("input_tokens").Int() + d.Cached + u.Get("cache_creation_input_tokens").Int()
			d.Out = u.Get("output_tokens").Int()
		case "message_stop":
			if !delta {
				return d, fmt.Errorf("message_stop without message_delta")
			}
			stopped = true
		case "error":
			if x.Get("error.type").Str == "" || x.Get("error.message").Str == "" {
				return d, fmt.Errorf("error event lacks type or message: %s", ev.Data)
			}
			d.Error, d.ErrorCode = true, x.Get("error.type").Str
		default:
			return d, fmt.Errorf("unknown event %s", typ)
		}
	}
	if !stopped && !d.Error {
		return d, fmt.Errorf("messages stream ends without message_stop or error")
	}
	if stopped && len(d.Tools) > 0 && d.Finish != "tool_calls" && d.Finish != "length" && !o.loose {
		return d, fmt.Errorf("tool_use blocks but stop_reason for %q", d.Finish)
	}
	return d, checkTools(&d, o)
}
