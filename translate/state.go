package translate

import (
	"bytes"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Account-bound state is what only the upstream account that made it can
// read: a Responses reasoning item (its encrypted_content, or its id, which
// with store:true names state kept by that account), any other input item
// carrying encrypted_content (Codex's compaction items), and an Anthropic
// thinking block's signature and redacted_thinking data — Troupe's own
// tagged forms included, since they carry those blobs. Sent to another
// account it is refused (OpenAI: 400 invalid_encrypted_content; Anthropic:
// an invalid thinking signature). StripAccountState removes it, keeping
// every message, call and result in order (docs/affinity.md#account-bound-state).

// stateMarkers are the byte strings one of which a body holding account
// bound state contains: StripAccountState returns at once without them.
var stateMarkers = [...][]byte{[]byte(`"encrypted_content"`), []byte(`"reasoning"`), []byte(`"signature"`), []byte(`"redacted_thinking"`)}

// StripAccountState returns body, a request in protocol p, without the
// account-bound state it carries, and whether there was any (body itself,
// unmodified, when there was none).
//
//   - Responses: input items of type "reasoning" and items carrying
//     encrypted_content are left out; everything else stays in order.
//   - Messages: thinking and redacted_thinking blocks are left out of
//     assistant messages (a message left empty goes too). When the last
//     assistant message lost one, thinking is turned off for the request
//     (Anthropic requires the last assistant turn's thinking block while
//     thinking is on), with Claude Code's clear_thinking context edits,
//     which need it on.
//   - Chat: no protocol field holds such state; body is returned.
//
// err is a *Error (400) when body is not a JSON object.
func StripAccountState(p Protocol, body []byte) (out []byte, stripped bool, err error) {
	if p == Chat || !hasStateMarker(body) {
		return body, false, nil
	}
	if !gjson.ValidBytes(body) {
		return nil, false, badRequest("", "the request body is not valid JSON")
	}
	root := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
	if !root.IsObject() {
		return nil, false, badRequest("", "the request body is not a JSON object")
	}
	switch p {
	case Responses:
		return stripResponses(body, root)
	case Messages:
		return stripMessages(body, root)
	}
	return body, false, nil
}

func hasStateMarker(body []byte) bool {
	for _, m := range stateMarkers {
		if bytes.Contains(body, m) {
			return true
		}
	}
	return false
}

// accountBoundItem reports whether a Responses input item is account-bound state.
func accountBoundItem(it gjson.Result) bool {
	return it.Get("type").Str == "reasoning" || it.Get("encrypted_content").Exists()
}

func stripResponses(body []byte, root gjson.Result) ([]byte, bool, error) {
	input := root.Get("input")
	if !input.IsArray() {
		return body, false, nil
	}
	kept, stripped := filterArray(input, accountBoundItem)
	if !stripped {
		return body, false, nil
	}
	out, err := sjson.SetRawBytes(body, "input", kept)
	if err != nil {
		return nil, false, badRequest("input", "the request body could not be rewritten: "+err.Error())
	}
	return out, true, nil
}

// thinkingBlock reports whether a Messages content block is account-bound state.
func thinkingBlock(b gjson.Result) bool {
	t := b.Get("type").Str
	return t == "thinking" || t == "redacted_thinking"
}

func stripMessages(body []byte, root gjson.Result) ([]byte, bool, error) {
	msgs := root.Get("messages")
	if !msgs.IsArray() {
		return body, false, nil
	}
	all := msgs.Array()
	lastAssistant := -1
	for i, m := range all {
		if m.Get("role").Str == "assistant" {
			lastAssistant = i
		}
	}
	out := make([]byte, 0, len(msgs.Raw))
	out = append(out, '[')
	stripped, lastLost, n := false, false, 0
	for i, m := range all {
		raw := m.Raw
		if content := m.Get("content"); m.Get("role").Str == "assistant" && content.IsArray() {
			kept, cut := filterArray(content, thinkingBlock)
			if cut {
				stripped = true
				lastLost = lastLost || i == lastAssistant
				if len(kept) == 2 { // "[]": nothing but thinking
					continue
				}
				r, err := sjson.SetRaw(raw, "content", string(kept))
				if err != nil {
					return nil, false, badRequest("messages", "the request body could not be rewritten: "+err.Error())
				}
				raw = r
			}
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, raw...)
		n++
	}
	if !stripped {
		return body, false, nil
	}
	out = append(out, ']')
	res, err := sjson.SetRawBytes(body, "messages", out)
	if err == nil && lastLost && root.Get("thinking").Exists() {
		res, err = sjson.DeleteBytes(res, "thinking")
		if err == nil {
			res, err = dropClearThinking(res)
		}
	}
	if err != nil {
		return nil, false, badRequest("messages", "the request body could not be rewritten: "+err.Error())
	}
	return res, true, nil
}

// dropClearThinking removes context_management edits that clear thinking
// (clear_thinking_*), which Anthropic accepts only with thinking on, and
// context_management itself when no edit is left.
func dropClearThinking(body []byte) ([]byte, error) {
	edits := gjson.GetBytes(body, "context_management.edits")
	if !edits.IsArray() {
		return body, nil
	}
	kept, cut := filterArray(edits, func(e gjson.Result) bool { return strings.HasPrefix(e.Get("type").Str, "clear_thinking") })
	if !cut {
		return body, nil
	}
	if len(kept) == 2 && len(gjson.GetBytes(body, "context_management").Map()) == 1 {
		return sjson.DeleteBytes(body, "context_management")
	}
	return sjson.SetRawBytes(body, "context_management.edits", kept)
}

// filterArray returns arr's raw JSON without the elements drop is true of,
// and whether any was dropped (the kept ones as they were, in order).
func filterArray(arr gjson.Result, drop func(gjson.Result) bool) ([]byte, bool) {
	out := make([]byte, 0, len(arr.Raw))
	out = append(out, '[')
	cut, n := false, 0
	arr.ForEach(func(_, v gjson.Result) bool {
		if drop(v) {
			cut = true
			return true
		}
		if n > 0 {
			out = append(out, ',')
		}
		out = append(out, v.Raw...)
		n++
		return true
	})
	return append(out, ']'), cut
}
