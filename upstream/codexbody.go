package upstream

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// CodexAccepts reports whether the ChatGPT Codex backend accepts top-level
// request member key on POST {base}/responses: exactly the members the
// Codex CLI itself sends (fixtures clients/codex-cli/*, Codex 0.169.0, and
// codex-backend/request-body.json): model, instructions, input, tools,
// tool_choice, parallel_tool_calls, reasoning, store, stream, include,
// prompt_cache_key, text, client_metadata, previous_response_id (sent
// on the WebSocket; over HTTP the backend answers it itself), and
// service_tier, which the Codex CLI sends for its fast mode ("priority")
// or "flex" (openai/codex codex-rs/codex-api/src/common.rs,
// ResponsesApiRequest and ResponseCreateWsRequest). Everything else —
// max_output_tokens above all ("Unsupported parameter: max_output_tokens"),
// temperature, top_p, metadata, user, truncation, stream_options, … — is
// refused by the backend or has no evidence of being accepted, and Troupe
// drops it (docs/codex.md#request-body).
func CodexAccepts(key string) bool {
	switch key {
	case "model", "instructions", "input", "tools", "tool_choice", "parallel_tool_calls", "reasoning",
		"store", "stream", "include", "prompt_cache_key", "text", "client_metadata", "previous_response_id",
		"service_tier":
		return true
	}
	return false
}

// codexAcceptsFrame is CodexAccepts for a response.create frame on the
// Codex WebSocket: generate (false: a warm-up) too, and not stream, which
// the WebSocket mode does not use, nor type, which the frame writes first.
func codexAcceptsFrame(key string) bool {
	switch key {
	case "generate":
		return true
	case "stream", "type":
		return false
	}
	return CodexAccepts(key)
}

// Raw JSON members the Codex backend requires.
var (
	codexStream = member{"stream", "true"}
	codexStore  = member{"store", "false"}
)

// requestBody returns body as the Codex backend takes it, in one pass over
// its top-level members (bodyPatch): only the members it accepts
// (CodexAccepts; for a WebSocket frame, codexAcceptsFrame with
// "type":"response.create" first), "store": false, "stream": true (HTTP
// only), and, when the account has an identity, its prompt_cache_key and
// installation id (applyIdentity). body itself is returned when nothing
// changes; it is never modified. ids are the identity's session ids (zero
// without an identity).
func (t *codex) requestBody(body []byte, h http.Header, frame bool) ([]byte, codexIDs, error) {
	p := bodyPatch{keep: CodexAccepts, set: make([]member, 0, 4)}
	if frame {
		p.keep, p.first = codexAcceptsFrame, `"type":"response.create"`
	} else {
		p.set = append(p.set, codexStream)
	}
	p.set = append(p.set, codexStore)
	var ids codexIDs
	if t.identity != nil {
		var ms [2]member
		var err error
		if ms, ids, err = t.identityMembers(body, h); err != nil {
			return nil, ids, err
		}
		p.set = append(p.set, ms[:]...)
	}
	out, _, err := p.apply(body)
	if err != nil {
		return nil, ids, fmt.Errorf("codex: %w", err)
	}
	return out, ids, nil
}

// identityMembers returns the two members the account's identity sets
// (see applyIdentity) and its session ids: prompt_cache_key, the account's
// key for the session, and client_metadata with x-codex-installation-id
// the account's installation id (the client's other metadata kept).
func (t *codex) identityMembers(body []byte, h http.Header) ([2]member, codexIDs, error) {
	in := sessionInput(body, h)
	ids := codexIDs{session: t.identity.Session(t.identityKey, in)}
	meta := gjson.GetBytes(body, "client_metadata").Raw
	if !gjson.Valid(meta) || !gjson.Parse(meta).IsObject() {
		meta = "{}"
	}
	meta, err := sjson.Set(meta, "x-codex-installation-id", t.installation)
	if err != nil {
		return [2]member{}, ids, fmt.Errorf("codex: set client_metadata: %w", err)
	}
	return [2]member{
		{"prompt_cache_key", strconv.Quote(t.identity.PromptCacheKey(t.identityKey, in))},
		{"client_metadata", meta},
	}, ids, nil
}
