package gateway

import (
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/troupe-gw/troupe/translate"
)

// createFrame is a client's response.create frame on the Responses
// WebSocket, read as far as the gateway needs it.
//
// Shape (https://developers.openai.com/api/docs/guides/websocket-mode;
// fixtures responses-websocket/client.response.create*.json and the Codex CLI
// captures clients/codex-cli/ws-*): {"type":"response.create", …the fields
// of a POST /v1/responses body…}; "generate": false asks for a warm-up (no
// output); "previous_response_id" with only the new input items continues a
// response of the same connection, store:false included.
type createFrame struct {
	body     []byte // the frame without "type" and "generate": a Responses request body
	model    string
	prevResp string
	warmup   bool   // generate:false
	input    []byte // the "input" value as a JSON array ("[]" when absent; a string becomes one user message)
}

// namedModel returns the model a frame parseCreateFrame refused names, for
// its record: its one top-level "model" member when that is a non-empty
// string; "" when the frame is not a JSON object, names no model, or names
// two (which one it meant would be a guess). Called on refusals only.
func namedModel(frame []byte) string {
	if !translate.ValidWithin(frame, maxJSONDepth) {
		return ""
	}
	root := gjson.Parse(b2s(frame))
	if !root.IsObject() {
		return ""
	}
	n, m := 0, gjson.Result{}
	root.ForEach(func(k, v gjson.Result) bool {
		if k.Str == "model" {
			n, m = n+1, v
		}
		return true
	})
	if n != 1 || m.Type != gjson.String {
		return ""
	}
	return strings.Clone(m.Str)
}

// parseCreateFrame validates a client text frame and reads it. Errors are
// APIErrors in OpenAI's shape, sent back as error frames; the connection
// stays open.
func parseCreateFrame(frame []byte) (createFrame, *APIError) {
	var f createFrame
	if !translate.ValidWithin(frame, maxJSONDepth) {
		return f, errBadJSON()
	}
	root := gjson.Parse(b2s(frame)) // strings kept are copied
	if !root.IsObject() {
		return f, errBadJSON()
	}
	var types, models int
	root.ForEach(func(k, _ gjson.Result) bool {
		switch k.Str {
		case "type":
			types++
		case "model":
			models++
		}
		return true
	})
	if types > 1 || models > 1 {
		p := "type"
		if models > 1 {
			p = "model"
		}
		return f, errBadParam(p, "Duplicate key '"+p+"' in the frame.")
	}
	switch t := root.Get("type"); {
	case t.Type != gjson.String:
		return f, &APIError{Status: 400, Type: "invalid_request_error", Code: "invalid_type", Param: "type",
			Message: "Each message must be a JSON object with \"type\": \"response.create\"."}
	case t.Str == "response.append":
		return f, &APIError{Status: 400, Type: "invalid_request_error", Code: "unsupported_event_type", Param: "type",
			Message: "response.append is the obsolete v1 WebSocket protocol; send response.create with previous_response_id and the new input items."}
	case t.Str != "response.create":
		return f, &APIError{Status: 400, Type: "invalid_request_error", Code: "unsupported_event_type", Param: "type",
			Message: "Unsupported message type '" + clip(t.Str) + "': the Responses WebSocket accepts response.create."}
	}
	m := root.Get("model")
	switch {
	case !m.Exists() || m.Type == gjson.Null || (m.Type == gjson.String && m.Str == ""):
		return f, errMissingModel()
	case m.Type != gjson.String:
		return f, errBadParam("model", "Invalid type for 'model': expected a string.")
	}
	f.model = strings.Clone(m.Str)
	if p := root.Get("previous_response_id"); p.Exists() && p.Type != gjson.Null {
		if p.Type != gjson.String {
			return f, errBadParam("previous_response_id", "Invalid type for 'previous_response_id': expected a string.")
		}
		f.prevResp = strings.Clone(p.Str)
	}
	if g := root.Get("generate"); g.Exists() {
		if g.Type != gjson.True && g.Type != gjson.False {
			return f, errBadParam("generate", "Invalid type for 'generate': expected a boolean.")
		}
		f.warmup = g.Type == gjson.False
	}
	switch in := root.Get("input"); {
	case !in.Exists() || in.Type == gjson.Null:
		f.input = []byte("[]")
	case in.Type == gjson.String:
		b := append([]byte(nil), `[{"type":"message","role":"user","content":`...)
		b = append(b, in.Raw...)
		f.input = append(b, "}]"...)
	case in.IsArray():
		f.input = []byte(in.Raw)
	default:
		return f, errBadParam("input", "Invalid type for 'input': expected a string or an array of input items.")
	}
	body, err := sjson.DeleteBytes(frame, "type") // a new slice: frame is not changed
	if err == nil && root.Get("generate").Exists() {
		body, err = sjson.DeleteBytes(body, "generate")
	}
	if err != nil {
		return f, errBadJSON()
	}
	f.body = body
	return f, nil
}

// appendItems appends the items of JSON array b to the JSON array dst
// (both "[…]"), returning the joined array.
func appendItems(dst, b []byte) []byte {
	inner := gjson.ParseBytes(b)
	if !inner.IsArray() {
		return dst
	}
	if len(dst) == 0 {
		dst = append(dst, "[]"...)
	}
	dst = dst[:len(dst)-1] // drop ']'
	first := len(dst) > 0 && dst[len(dst)-1] == '['
	inner.ForEach(func(_, v gjson.Result) bool {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, v.Raw...)
		return true
	})
	return append(dst, ']')
}
