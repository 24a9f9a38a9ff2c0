package translate

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A generator of upstream streams for the property test and the fuzz
// target: a random answer (text, reasoning, refusal, parallel tool calls,
// usage with cache, sometimes an error mid-stream) rendered as one upstream
// protocol's events in an order that protocol allows, with the blocks'
// events interleaved at random where the protocol allows it, plus what a
// client must learn from its translation.

// randSource is the randomness the generator draws from: a seeded PRNG in
// the property test, the fuzzer's bytes in the fuzz target.
type randSource interface{ IntN(n int) int }

// byteSource draws from a byte string; past its end every draw is 0.
type byteSource struct {
	b []byte
	i int
}

func (s *byteSource) IntN(n int) int {
	if n <= 1 {
		return 0
	}
	v := 0
	for k := 0; k < 2 && s.i < len(s.b); k++ {
		v = v<<8 | int(s.b[s.i])
		s.i++
	}
	return v % n
}

var _ randSource = (*rand.Rand)(nil)

// genBlock is one block of a generated answer.
type genBlock struct {
	kind  blockKind
	parts []string // text, refusal; reasoning summary parts; tool: its JSON arguments (one part)
	id    string   // tool call id; reasoning item id
	name  string   // tool name
	state string   // reasoning state: Responses encrypted_content, Anthropic signature
	// where a Responses upstream puts encrypted_content: "added", "done",
	// "completed" (only in response.completed's output)
	stateAt string
	whole   bool // Responses reasoning: summaries only in output_item.done
}

// genAnswer is a generated answer and its rendering.
type genAnswer struct {
	blocks          []genBlock // in the order they start
	finish          string     // stop, length, tool_calls
	in, cached, out int64
	cacheWrite      int64
	failAfter       int  // the upstream fails after this many block steps; -1: never
	failed          bool // it did
	stream          []byte
}

// words used for text: ASCII, multi-byte UTF-8, JSON escapes, long runs.
var genWords = []string{"hello", " world", "ünïcödé", " 世界", "🎉", ` "quoted"`, `back\slash`, "\nnew line", "\ttab", " </script>", "a"}

func genText(r randSource, long bool) string {
	var b strings.Builder
	n := 1 + r.IntN(6)
	for range n {
		b.WriteString(genWords[r.IntN(len(genWords))])
	}
	if long {
		b.WriteString(strings.Repeat("長い行", 20000+r.IntN(20000)))
	}
	return b.String()
}

func genArgs(r randSource) string {
	switch r.IntN(6) {
	case 0:
		return "" // no arguments: the client gets {}
	case 1:
		return `{}`
	case 2:
		return `{"path":"a/ü.go","lines":[1,2,{"x":"}]"}]}`
	case 3:
		return `{ "q" : "say \"hi\" \\ {not a brace}" , "n": 3 }`
	case 4:
		return `{"text":` + strconv.Quote(genText(r, false)) + `}`
	}
	return `{"a":{"b":{"c":[true,false,null]}},"d":"` + strings.Repeat("x", r.IntN(300)) + `"}`
}

// split cuts s into 1..k fragments at rune boundaries (a JSON string
// carries whole characters; a split character is the reader's business).
func split(r randSource, s string, k int) []string {
	if s == "" {
		return nil
	}
	n := 1 + r.IntN(k)
	var out []string
	for i := 1; i < n && len(s) > 1; i++ {
		at := 1 + r.IntN(len(s)-1)
		for at < len(s) && !utf8.RuneStart(s[at]) {
			at++
		}
		if at >= len(s) {
			break
		}
		out = append(out, s[:at])
		s = s[at:]
	}
	return append(out, s)
}

// genScript draws an answer's blocks for an upstream of protocol up.
func genScript(r randSource, up Protocol) *genAnswer {
	a := &genAnswer{failAfter: -1}
	if r.IntN(2) == 0 {
		b := genBlock{kind: blockReasoning, id: "rs_gen" + strconv.Itoa(r.IntN(1000)), whole: up == Responses && r.IntN(4) == 0}
		for range 1 + r.IntN(2) {
			b.parts = append(b.parts, genText(r, false))
		}
		if up != Responses {
			b.parts = []string{strings.Join(b.parts, "")}
		}
		if up != Chat && r.IntN(4) > 0 {
			b.state = "gAAAA" + strings.Repeat("Zm9v", 1+r.IntN(50)) + "+/=="
			b.stateAt = []string{"added", "done", "completed"}[r.IntN(3)]
		}
		a.blocks = append(a.blocks, b)
	}
	switch r.IntN(5) {
	case 0:
	case 1:
		if up != Messages {
			a.blocks = append(a.blocks, genBlock{kind: blockRefusal, parts: []string{genText(r, false)}})
			break
		}
		fallthrough
	default:
		a.blocks = append(a.blocks, genBlock{kind: blockText, parts: []string{genText(r, r.IntN(40) == 0)}})
	}
	tools := r.IntN(4)
	if tools == 3 {
		tools = 2 + r.IntN(4)
	}
	for i := range tools {
		a.blocks = append(a.blocks, genBlock{kind: blockTool, id: fmt.Sprintf("call_g%d_%d", r.IntN(100), i),
			name: []string{"read", "write", "exec"}[r.IntN(3)], parts: []string{genArgs(r)}})
	}
	if up == Responses && r.IntN(8) == 0 && tools == 0 {
		// a second message item
		a.blocks = append(a.blocks, genBlock{kind: blockText, parts: []string{genText(r, false)}})
	}
	if up != Chat && len(a.blocks) > 1 && r.IntN(6) == 0 {
		// text after the tool calls (Messages, Responses: a message item last)
		a.blocks = append(a.blocks, genBlock{kind: blockText, parts: []string{genText(r, false)}})
	}
	switch {
	case tools > 0:
		a.finish = "tool_calls"
	case r.IntN(5) == 0:
		a.finish = "length"
	default:
		a.finish = "stop"
	}
	a.in, a.out = int64(10+r.IntN(5000)), int64(1+r.IntN(900))
	a.cached = int64(r.IntN(int(a.in)))
	if up == Messages {
		a.cacheWrite = int64(r.IntN(int(a.in - a.cached + 1)))
	}
	return a
}

// step is one event-sized action on a block: its start, fragment i, or its
// end.
type step struct {
	block int
	frag  int // -1 start, len(frags) end
}

// schedule interleaves the blocks' steps: each block's own steps stay in
// order, blocks start in order, and blocks that may not overlap (seq
// reports it) run one after the other.
func schedule(r randSource, frags [][]string, overlap func(i, j int) bool) []step {
	pos := make([]int, len(frags)) // next step of each block: -1 start … len end, len+1 done
	for i := range pos {
		pos[i] = -1
	}
	var out []step
	started := 0
	for {
		var ready []int
		for i := range frags {
			if pos[i] > len(frags[i]) {
				continue
			}
			if pos[i] == -1 {
				if i != started {
					continue // blocks start in order
				}
				ok := true
				for j := range i {
					if pos[j] <= len(frags[j]) && !overlap(j, i) {
						ok = false
					}
				}
				if !ok {
					continue
				}
			}
			ready = append(ready, i)
		}
		if len(ready) == 0 {
			return out
		}
		i := ready[r.IntN(len(ready))]
		if pos[i] == -1 {
			started++
		}
		out = append(out, step{i, pos[i]})
		pos[i]++
	}
}

// fragments splits every block's parts into the fragments its deltas carry.
func (a *genAnswer) fragments(r randSource) [][]string {
	out := make([][]string, len(a.blocks))
	for i, b := range a.blocks {
		if b.kind == blockReasoning && b.whole {
			continue // summaries only in output_item.done
		}
		for _, p := range b.parts {
			out[i] = append(out[i], split(r, p, 6)...)
		}
	}
	return out
}

// render writes the answer as an upstream stream of protocol up.
func (a *genAnswer) render(r randSource, up Protocol) {
	if r.IntN(6) == 0 {
		a.failAfter = r.IntN(8)
	}
	switch up {
	case Chat:
		a.renderChat(r)
	case Responses:
		a.renderResponses(r)
	default:
		a.renderMessages(r)
	}
}

func jsonStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func (a *genAnswer) renderChat(r randSource) {
	frags := a.fragments(r)
	// Text-like blocks come one after the other and before the tool calls;
	// tool calls interleave freely.
	steps := schedule(r, frags, func(i, j int) bool {
		return a.blocks[i].kind == blockTool && a.blocks[j].kind == blockTool
	})
	head := `{"id":"chatcmpl-gen","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	chunk := func(delta string) {
		a.stream = AppendData(a.stream, []byte(head+delta+`,"finish_reason":null}]}`))
	}
	if r.IntN(2) == 0 {
		chunk(`{"role":"assistant","content":""}`)
	}
	toolIndex := map[int]int{}
	inStart := map[int]bool{} // the call's first fragment went with its start
	var pending []string      // tool fragments for one chunk
	flush := func() {
		if len(pending) > 0 {
			chunk(`{"tool_calls":[` + strings.Join(pending, ",") + `]}`)
			pending = pending[:0]
		}
	}
	for n, st := range steps {
		if n == a.failAfter {
			flush()
			a.stream = AppendData(a.stream, []byte(`{"error":{"message":"boom","type":"server_error","param":null,"code":"gen_fail"}}`))
			a.failed = true
			return
		}
		b := &a.blocks[st.block]
		if b.kind != blockTool {
			flush()
			if st.frag < 0 || st.frag >= len(frags[st.block]) {
				continue
			}
			k := map[blockKind]string{blockText: "content", blockReasoning: "reasoning_content", blockRefusal: "refusal"}[b.kind]
			chunk(`{` + jsonStr(k) + `:` + jsonStr(frags[st.block][st.frag]) + `}`)
			continue
		}
		if st.frag == len(frags[st.block]) || st.frag == 0 && inStart[st.block] {
			continue // Chat never says a call ended
		}
		if st.frag < 0 {
			toolIndex[st.block] = len(toolIndex)
		}
		idx := strconv.Itoa(toolIndex[st.block])
		var f string
		if st.frag < 0 {
			first := ""
			if len(frags[st.block]) > 0 && r.IntN(3) == 0 {
				first = frags[st.block][0]
				inStart[st.block] = true
			}
			f = `{"index":` + idx + `,"id":` + jsonStr(b.id) + `,"type":"function","function":{"name":` + jsonStr(b.name) + `,"arguments":` + jsonStr(first) + `}}`
		} else {
			f = `{"index":` + idx + `,"function":{"arguments":` + jsonStr(frags[st.block][st.frag]) + `}}`
		}
		for _, p := range pending {
			if strings.HasPrefix(p, `{"index":`+idx+`,`) {
				flush()
				break
			}
		}
		pending = append(pending, f)
		if r.IntN(2) == 0 {
			flush()
		}
	}
	flush()
	fr := a.finish
	a.stream = AppendData(a.stream, []byte(head+`{},"finish_reason":`+jsonStr(fr)+`}]}`))
	a.stream = AppendData(a.stream, []byte(fmt.Sprintf(`{"id":"chatcmpl-gen","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
		a.in, a.out, a.in+a.out, a.cached)))
	a.stream = AppendData(a.stream, []byte("[DONE]"))
}

func (a *genAnswer) renderResponses(r randSource) {
	frags := a.fragments(r)
	steps := schedule(r, frags, func(i, j int) bool { return true })
	seq := 0
	ev := func(name, rest string) {
		a.stream = AppendEvent(a.stream, name, []byte(`{"type":"`+name+`","sequence_number":`+strconv.Itoa(seq)+rest+`}`))
		seq++
	}
	resp := func(status, output, usage string) string {
		return `,"response":{"id":"resp_gen","object":"response","created_at":1,"status":"` + status + `","model":"m","output":[` + output + `],"usage":` + usage + `}`
	}
	ev("response.created", resp("in_progress", "", "null"))
	ev("response.in_progress", resp("in_progress", "", "null"))
	out := map[int]int{}
	ids := map[int]string{}
	done := make([]string, len(a.blocks))
	completed := make([]string, len(a.blocks))
	for n, st := range steps {
		if n == a.failAfter {
			ev("error", `,"error":{"type":"server_error","code":"gen_fail","message":"boom","param":null}`)
			ev("response.failed", `,"response":{"id":"resp_gen","object":"response","status":"failed","error":{"code":"gen_fail","message":"boom"},"output":[],"usage":null}`)
			a.failed = true
			return
		}
		b := &a.blocks[st.block]
		if st.frag < 0 {
			out[st.block] = len(out)
		}
		oi := `,"output_index":` + strconv.Itoa(out[st.block])
		switch b.kind {
		case blockText, blockRefusal:
			id := "msg_gen" + strconv.Itoa(st.block)
			ref := `,"item_id":"` + id + `"` + oi + `,"content_index":0`
			pt, field := "output_text", "text"
			if b.kind == blockRefusal {
				pt, field = "refusal", "refusal"
			}
			switch {
			case st.frag < 0:
				ev("response.output_item.added", oi+`,"item":{"id":"`+id+`","type":"message","status":"in_progress","role":"assistant","content":[]}`)
				ev("response.content_part.added", ref+`,"part":{"type":"`+pt+`","`+field+`":""}`)
			case st.frag < len(frags[st.block]):
				name := "response.output_text.delta"
				if b.kind == blockRefusal {
					name = "response.refusal.delta"
				}
				ev(name, ref+`,"delta":`+jsonStr(frags[st.block][st.frag]))
			default:
				text := jsonStr(b.parts[0])
				if b.kind == blockText {
					ev("response.output_text.done", ref+`,"text":`+text)
				} else {
					ev("response.refusal.done", ref+`,"refusal":`+text)
				}
				ev("response.content_part.done", ref+`,"part":{"type":"`+pt+`","`+field+`":`+text+`}`)
				done[st.block] = `{"id":"` + id + `","type":"message","status":"completed","role":"assistant","content":[{"type":"` + pt + `","` + field + `":` + text + `}]}`
				ev("response.output_item.done", oi+`,"item":`+done[st.block])
			}
		case blockReasoning:
			ref := `,"item_id":"` + b.id + `"` + oi
			enc := func(where string) string {
				if b.state != "" && b.stateAt == where {
					return `,"encrypted_content":"` + b.state + `"`
				}
				return ""
			}
			switch {
			case st.frag < 0:
				ev("response.output_item.added", oi+`,"item":{"id":"`+b.id+`","type":"reasoning"`+enc("added")+`,"summary":[]}`)
			case st.frag < len(frags[st.block]):
				// which summary part this fragment belongs to
				part, off := 0, 0
				for k := 0; k < st.frag; k++ {
					off += len(frags[st.block][k])
				}
				for part < len(b.parts)-1 && off >= len(b.parts[part]) {
					off -= len(b.parts[part])
					part++
				}
				if off == 0 {
					ev("response.reasoning_summary_part.added", ref+`,"summary_index":`+strconv.Itoa(part)+`,"part":{"type":"summary_text","text":""}`)
				}
				ev("response.reasoning_summary_text.delta", ref+`,"summary_index":`+strconv.Itoa(part)+`,"delta":`+jsonStr(frags[st.block][st.frag]))
			default:
				var sum []string
				for _, p := range b.parts {
					sum = append(sum, `{"type":"summary_text","text":`+jsonStr(p)+`}`)
				}
				item := func(where string) string {
					return `{"id":"` + b.id + `","type":"reasoning"` + enc(where) + `,"summary":[` + strings.Join(sum, ",") + `]}`
				}
				done[st.block] = item("done")
				completed[st.block] = item("completed")
				ev("response.output_item.done", oi+`,"item":`+done[st.block])
			}
		case blockTool:
			id := "fc_gen" + strconv.Itoa(st.block)
			ids[st.block] = id
			ref := `,"item_id":"` + id + `"` + oi
			switch {
			case st.frag < 0:
				ev("response.output_item.added", oi+`,"item":{"id":"`+id+`","type":"function_call","status":"in_progress","arguments":"","call_id":"`+b.id+`","name":"`+b.name+`"}`)
			case st.frag < len(frags[st.block]):
				ev("response.function_call_arguments.delta", ref+`,"delta":`+jsonStr(frags[st.block][st.frag]))
			default:
				args := jsonStr(b.parts[0])
				ev("response.function_call_arguments.done", ref+`,"arguments":`+args)
				done[st.block] = `{"id":"` + id + `","type":"function_call","status":"completed","arguments":` + args + `,"call_id":"` + b.id + `","name":"` + b.name + `"}`
				ev("response.output_item.done", oi+`,"item":`+done[st.block])
			}
		}
	}
	items := make([]string, len(a.blocks))
	for i := range a.blocks {
		it := done[i]
		if completed[i] != "" {
			it = completed[i]
		}
		items[out[i]] = it
	}
	usage := fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d}`,
		a.in, a.cached, a.out, a.in+a.out)
	if a.finish == "length" {
		ev("response.incomplete", strings.TrimSuffix(resp("incomplete", strings.Join(items, ","), usage), "}")+`,"incomplete_details":{"reason":"max_output_tokens"}}`)
		return
	}
	ev("response.completed", resp("completed", strings.Join(items, ","), usage))
}

func (a *genAnswer) renderMessages(r randSource) {
	frags := a.fragments(r)
	// Anthropic sends blocks one after the other; the decoder goes by index
	// and would take them interleaved too, so now and then they are.
	inter := r.IntN(4) == 0
	steps := schedule(r, frags, func(i, j int) bool { return inter })
	ev := func(name, rest string) {
		a.stream = AppendEvent(a.stream, name, []byte(`{"type":"`+name+`"`+rest+`}`))
		if r.IntN(10) == 0 {
			a.stream = AppendEvent(a.stream, "ping", []byte(`{"type": "ping"}`))
		}
	}
	ev("message_start", fmt.Sprintf(`,"message":{"id":"msg_gen","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":1}}`,
		a.in-a.cached-a.cacheWrite, a.cacheWrite, a.cached))
	index := map[int]int{}
	for n, st := range steps {
		if n == a.failAfter {
			ev("error", `,"error":{"type":"overloaded_error","message":"boom"}`)
			a.failed = true
			return
		}
		b := &a.blocks[st.block]
		if st.frag < 0 {
			index[st.block] = len(index)
		}
		ix := `,"index":` + strconv.Itoa(index[st.block])
		switch {
		case st.frag < 0:
			cb := map[blockKind]string{blockText: `{"type":"text","text":""}`, blockReasoning: `{"type":"thinking","thinking":"","signature":""}`,
				blockTool: `{"type":"tool_use","id":"` + b.id + `","name":"` + b.name + `","input":{}}`}[b.kind]
			ev("content_block_start", ix+`,"content_block":`+cb)
			if b.kind == blockTool && r.IntN(3) == 0 {
				ev("content_block_delta", ix+`,"delta":{"type":"input_json_delta","partial_json":""}`)
			}
		case st.frag < len(frags[st.block]):
			f := jsonStr(frags[st.block][st.frag])
			switch b.kind {
			case blockText:
				ev("content_block_delta", ix+`,"delta":{"type":"text_delta","text":`+f+`}`)
			case blockReasoning:
				ev("content_block_delta", ix+`,"delta":{"type":"thinking_delta","thinking":`+f+`}`)
			default:
				ev("content_block_delta", ix+`,"delta":{"type":"input_json_delta","partial_json":`+f+`}`)
			}
		default:
			if b.kind == blockReasoning && b.state != "" {
				ev("content_block_delta", ix+`,"delta":{"type":"signature_delta","signature":"`+b.state+`"}`)
			}
			ev("content_block_stop", ix)
		}
	}
	sr := map[string]string{"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}[a.finish]
	ev("message_delta", fmt.Sprintf(`,"delta":{"stop_reason":"%s","stop_sequence":null},"usage":{"output_tokens":%d}`, sr, a.out))
	ev("message_stop", "")
}

// expect is what a client of protocol to must learn from the answer.
func (a *genAnswer) expect(from, to Protocol) clientDigest {
	d := clientDigest{Finish: a.finish, In: a.in, Out: a.out, Cached: a.cached, HasUsage: true}
	for _, b := range a.blocks {
		switch b.kind {
		case blockText:
			d.Text += b.parts[0]
		case blockRefusal:
			if to == Messages {
				d.Text += b.parts[0]
			} else {
				d.Refusal += b.parts[0]
			}
		case blockReasoning:
			d.Reasoning += strings.Join(b.parts, "\n\n")
			switch {
			case b.state == "" || to == Chat:
			case from == Responses:
				d.Signatures = append(d.Signatures, b.state)
			case from == Messages:
				d.Signatures = append(d.Signatures, sigAnthropic+b.state)
			}
		case blockTool:
			args := b.parts[0]
			if args == "" {
				args = "{}"
			}
			d.Tools = append(d.Tools, clientTool{Name: b.name, Args: args})
		}
	}
	return d
}
