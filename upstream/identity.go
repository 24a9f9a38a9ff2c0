package upstream

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
)

// Identity derives the per-account identifiers a Codex CLI installation
// would have — installation id, session and thread ids, prompt_cache_key —
// with HMAC-SHA256 under one instance secret. The same account and input
// always give the same id (so the upstream's prompt cache and sticky routing
// keep working across restarts and instances that share the secret), and two
// accounts never share one (so the upstream cannot link accounts through a
// client's session that failed over from one to the other). Ids are
// formatted as version-4-shaped UUIDs, like Codex's own. Safe for concurrent
// use; the zero value is not usable, use NewIdentity.
type Identity struct {
	pool sync.Pool // hash.Hash keyed with the secret
}

// NewIdentity returns an Identity keyed with secret (at least 16 bytes are
// advised; Troupe derives it from the master key by default).
func NewIdentity(secret []byte) *Identity {
	key := append([]byte(nil), secret...)
	id := &Identity{}
	id.pool.New = func() any { return hmac.New(sha256.New, key) }
	return id
}

// Installation returns the account's x-codex-installation-id.
func (id *Identity) Installation(accountID string) string {
	return id.derive("installation", accountID, "")
}

// Session returns the account's session id for the client's session (or
// thread, or prompt-cache) key input.
func (id *Identity) Session(accountID, input string) string {
	return id.derive("session", accountID, input)
}

// PromptCacheKey returns the account's prompt_cache_key for input.
func (id *Identity) PromptCacheKey(accountID, input string) string {
	return id.derive("prompt_cache_key", accountID, input)
}

func (id *Identity) derive(kind, accountID, input string) string {
	h := id.pool.Get().(hash.Hash)
	h.Reset()
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(accountID))
	h.Write([]byte{0})
	h.Write([]byte(input))
	var sum [sha256.Size]byte
	out := h.Sum(sum[:0])
	id.pool.Put(h)
	return uuidString(out[:16])
}

// uuidString formats 16 bytes as a version 4, variant 1 UUID.
func uuidString(b []byte) string {
	var u [16]byte
	copy(u[:], b)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}
