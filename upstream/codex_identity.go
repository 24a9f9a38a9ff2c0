package upstream

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// codexIDs are the identifiers one codex request carries upstream, derived
// for the account (see Identity).
type codexIDs struct {
	session string // session-id, thread-id, x-client-request-id (and the legacy session_id, conversation_id)
}

// Canonical keys of the session headers the identity rewrites.
var (
	hSessionID       = http.CanonicalHeaderKey("session-id")
	hSessionIDLegacy = http.CanonicalHeaderKey("session_id")
	hThreadID        = http.CanonicalHeaderKey("thread-id")
	hConversationID  = http.CanonicalHeaderKey("conversation_id")
	hClientRequestID = http.CanonicalHeaderKey("x-client-request-id")
	hWindowID        = http.CanonicalHeaderKey("x-codex-window-id")
	hTurnMetadata    = http.CanonicalHeaderKey("x-codex-turn-metadata")
)

// sessionInput is what a request's session identity is derived from: the
// client's own session id (any of Codex's session headers), else its
// prompt_cache_key, else a digest of the conversation's start (instructions
// and first input item), which stays the same on every turn of it.
func sessionInput(body []byte, h http.Header) string {
	for _, k := range []string{hSessionID, hThreadID, hSessionIDLegacy, hConversationID} {
		if v := h[k]; len(v) > 0 && v[0] != "" {
			return "s:" + v[0]
		}
	}
	if k := gjson.GetBytes(body, "prompt_cache_key"); k.Type == gjson.String && k.Str != "" {
		return "k:" + k.Str
	}
	sum := sha256.New()
	sum.Write([]byte(gjson.GetBytes(body, "instructions").Raw))
	sum.Write([]byte{0})
	in := gjson.GetBytes(body, "input")
	if in.IsArray() {
		sum.Write([]byte(in.Get("0").Raw))
	} else {
		sum.Write([]byte(in.Raw))
	}
	return "c:" + hex.EncodeToString(sum.Sum(nil)[:16])
}

// applyIdentity rewrites body for the account's identity: prompt_cache_key
// becomes the account's key for the session and
// client_metadata["x-codex-installation-id"] the account's installation id,
// as the Codex CLI sends them (fixture request-body.json). body must be a
// JSON object; the result is a new slice when anything changed. Do and
// CreateFrame make the same change within requestBody's one pass.
func (t *codex) applyIdentity(body []byte, req *Request) ([]byte, codexIDs, error) {
	ms, ids, err := t.identityMembers(body, req.Header)
	if err != nil {
		return nil, ids, err
	}
	p := bodyPatch{set: ms[:]}
	out, _, err := p.apply(body)
	if err != nil {
		return nil, ids, fmt.Errorf("codex: %w", err)
	}
	return out, ids, nil
}

// setIdentityHeaders sets the session headers the Codex CLI sends on every
// turn (fixture request-headers.http: session-id, thread-id,
// x-client-request-id, x-codex-window-id, x-codex-turn-metadata) with the
// account's derived session id in place of the client's. The legacy
// session_id and conversation_id are rewritten only when the client sent
// them; a client's window counter ("<thread>:<n>") keeps its n.
func setIdentityHeaders(h, client http.Header, ids codexIDs) {
	s := []string{ids.session}
	h[hSessionID] = s
	h[hThreadID] = s
	h[hClientRequestID] = s
	if _, ok := client[hSessionIDLegacy]; ok {
		h[hSessionIDLegacy] = s
	}
	if _, ok := client[hConversationID]; ok {
		h[hConversationID] = s
	}
	n := "0"
	if v := client[hWindowID]; len(v) > 0 {
		if i := strings.LastIndexByte(v[0], ':'); i >= 0 && i+1 < len(v[0]) {
			n = v[0][i+1:]
		}
	}
	h[hWindowID] = []string{ids.session + ":" + n}
	meta := `{"session_id":"","thread_id":"","turn_id":"","sandbox":"none"}`
	if v := client[hTurnMetadata]; len(v) > 0 && gjson.Valid(v[0]) && gjson.Parse(v[0]).IsObject() {
		meta = v[0]
	}
	if m, err := sjson.Set(meta, "session_id", ids.session); err == nil {
		meta = m
	}
	if m, err := sjson.Set(meta, "thread_id", ids.session); err == nil {
		meta = m
	}
	h[hTurnMetadata] = []string{meta}
}
