package gateway

import (
	"bytes"
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// keyCache caches API-key lookups by hash: hits for positiveTTL, misses for
// negativeTTL, so a flood of bad keys costs one lookup per key per period.
// It is safe for concurrent use and takes no lock on a hit.
type keyCache struct {
	store       storage.APIKeys
	positiveTTL time.Duration
	negativeTTL time.Duration
	entries     sync.Map // hash → *cachedKey
	size        atomic.Int64
	gen         atomic.Uint64 // bumped by invalidate: entries of older generations are stale
	now         func() time.Time
	digests     *keyDigests // found keys' digests by a MAC of their secret; nil: none kept
}

// cachedKey is one lookup's result. It is never changed once cached.
type cachedKey struct {
	hash    string // storage.HashKey of the secret
	key     storage.APIKey
	found   bool
	expires time.Time
	gen     uint64 // the cache's generation when it was looked up
}

// fresh reports whether ck may still be used at now: not expired, and
// not dropped by an invalidation since it was looked up.
func (c *keyCache) fresh(ck *cachedKey, now time.Time) bool {
	return now.Before(ck.expires) && ck.gen == c.gen.Load()
}

// cached returns the fresh entry of hash, or nil.
func (c *keyCache) cached(hash string) *cachedKey {
	if v, ok := c.entries.Load(hash); ok {
		if ck := v.(*cachedKey); c.fresh(ck, c.now()) {
			return ck
		}
	}
	return nil
}

// lookup returns the fresh entry of hash, asking the store (bounded by ctx)
// when there is none.
func (c *keyCache) lookup(ctx context.Context, hash string) (*cachedKey, error) {
	if ck := c.cached(hash); ck != nil {
		return ck, nil
	}
	gen, now := c.gen.Load(), c.now()
	k, err := c.store.APIKeyByHash(ctx, hash)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		ck := &cachedKey{hash: hash, expires: now.Add(c.negativeTTL), gen: gen}
		c.put(hash, ck)
		return ck, nil
	case err != nil:
		return nil, err
	}
	ck := &cachedKey{hash: hash, key: k, found: true, expires: now.Add(c.positiveTTL), gen: gen}
	c.put(hash, ck)
	return ck, nil
}

// invalidate drops every cached entry (after a key was created, changed or
// removed), and with them the entries handed to requests in flight
// (keyHints).
func (c *keyCache) invalidate() {
	c.gen.Add(1)
	c.entries.Clear()
	c.size.Store(0)
	c.digests.forget()
}

// secretHash returns secret's digest (storage.HashKeyBytes), remembered
// for a key found before (keyDigests) or computed; and, when computed, the
// tag to remember it by once the key is found (remember), else the zero
// tag.
func (c *keyCache) secretHash(secret []byte) (string, digestTag) {
	hash, t := c.digests.lookup(secret)
	if hash != "" {
		return hash, digestTag{}
	}
	return storage.HashKeyBytes(secret), t
}

// remember files hash under tag t (secretHash's) when lookup ck found a
// key.
func (c *keyCache) remember(ck *cachedKey, t digestTag, hash string) {
	if ck.found {
		c.digests.remember(t, hash)
	}
}

// maxCachedKeys bounds the cache: made-up keys are cached as misses, so
// without a bound a flood of random keys would grow memory forever. Past it
// the cache starts over (hits refill it at the cost of one lookup each).
const maxCachedKeys = 100_000

// put caches v under hash, starting over when the cache is full.
func (c *keyCache) put(hash string, v *cachedKey) {
	if _, loaded := c.entries.Swap(hash, v); !loaded && c.size.Add(1) > maxCachedKeys {
		c.invalidate()
	}
}

// keyHints carries the key lookup that headerReceived made for a request's
// secret to the handler of the same request, so the secret is hashed once
// per request. An entry is filed under the address of the request's header
// (fasthttp passes headerReceived the header of the RequestCtx the handler
// then gets) with a fingerprint of the secret; headerReceived files or
// clears the entry of every request, and the handler takes it. An entry
// whose handler never ran (the body failed to arrive) is overwritten by the
// next request on the same RequestCtx; the address is not a pointer, so it
// keeps nothing alive. A hint is only a shortcut: when there is none, or
// its fingerprint differs from the secret the handler reads, or it is
// stale, the handler hashes and looks up the secret itself.
type keyHints struct {
	seed   maphash.Seed
	shards [16]hintShard
}

type hintShard struct {
	mu sync.Mutex
	m  map[uintptr]keyHint
	_  [40]byte // keep neighbouring shards' locks off one cache line
}

type keyHint struct {
	ck *cachedKey
	fp uint64 // maphash of the secret
}

// maxHintsPerShard bounds a shard; entries past it are left behind by
// requests whose body never arrived, so dropping them all costs nothing
// but a hash each for the requests in flight.
const maxHintsPerShard = 1024

func newKeyHints() *keyHints { return &keyHints{seed: maphash.MakeSeed()} }

func (h *keyHints) shard(hdr *fasthttp.RequestHeader) (*hintShard, uintptr) {
	p := uintptr(unsafe.Pointer(hdr))
	return &h.shards[(p>>6)%uintptr(len(h.shards))], p
}

// put files ck as the lookup of secret for the request whose header is hdr;
// a nil ck clears the request's entry.
func (h *keyHints) put(hdr *fasthttp.RequestHeader, secret []byte, ck *cachedKey) {
	sh, p := h.shard(hdr)
	sh.mu.Lock()
	switch {
	case ck == nil:
		delete(sh.m, p)
	case sh.m == nil || len(sh.m) >= maxHintsPerShard:
		sh.m = make(map[uintptr]keyHint, 64)
		fallthrough
	default:
		sh.m[p] = keyHint{ck: ck, fp: maphash.Bytes(h.seed, secret)}
	}
	sh.mu.Unlock()
}

// take removes and returns the lookup filed for hdr's request when it was
// made for secret, else nil.
func (h *keyHints) take(hdr *fasthttp.RequestHeader, secret []byte) *cachedKey {
	sh, p := h.shard(hdr)
	sh.mu.Lock()
	e, ok := sh.m[p]
	if ok {
		delete(sh.m, p)
	}
	sh.mu.Unlock()
	if !ok || e.fp != maphash.Bytes(h.seed, secret) {
		return nil
	}
	return e.ck
}

var (
	bearerPrefix = []byte("Bearer ")
	// headerAuthorization is Authorization's name in fasthttp's canonical
	// form, for PeekCanonical, which does not copy and normalize the name
	// as Peek does on every call.
	headerAuthorization = []byte(fasthttp.HeaderAuthorization)
	headerAPIKey        = []byte("x-api-key")
)

// clientSecret returns the API key the client sent: "Authorization: Bearer K"
// (OpenAI) or "x-api-key: K" (Anthropic).
func clientSecret(ctx *fasthttp.RequestCtx) []byte { return headerSecret(&ctx.Request.Header) }

// headerSecret is clientSecret of a request head.
func headerSecret(h *fasthttp.RequestHeader) []byte {
	if a := h.PeekCanonical(headerAuthorization); len(a) > len(bearerPrefix) &&
		bytes.EqualFold(a[:len(bearerPrefix)], bearerPrefix) {
		return bytes.TrimSpace(a[len(bearerPrefix):])
	}
	return bytes.TrimSpace(h.PeekBytes(headerAPIKey))
}

// validSecret reports whether secret can be a Troupe key at all (checked
// before anything is hashed or looked up).
func validSecret(secret []byte) bool {
	return len(secret) <= 256 && bytes.HasPrefix(secret, []byte(KeyPrefix))
}

// authenticate resolves the client's key; errors are client-facing. The
// lookup headerReceived made for the request is used when it is still
// fresh (keyHints), so the secret is hashed once per request.
func (s *Server) authenticate(ctx *fasthttp.RequestCtx) (storage.APIKey, *APIError) {
	k, aerr := s.authKey(ctx)
	if aerr != nil {
		return storage.APIKey{}, aerr
	}
	return *k, nil
}

// authKey is authenticate returning the key cache's entry itself, which
// nothing writes once it is cached: the caller must not write it either.
// A request's call holds it so (call.key): a copy was 216 of call's bytes,
// and took call to a larger size class (issue 21).
func (s *Server) authKey(ctx *fasthttp.RequestCtx) (*storage.APIKey, *APIError) {
	secret := clientSecret(ctx)
	if len(secret) == 0 {
		if anthropicClient(ctx) {
			return nil, &APIError{Status: 401, Type: "authentication_error", Code: "missing_api_key",
				Message: "x-api-key header is required (or Authorization: Bearer YOUR_KEY)."}
		}
		return nil, errMissingKey()
	}
	if !validSecret(secret) {
		return nil, errInvalidKey()
	}
	ck := s.hints.take(&ctx.Request.Header, secret)
	if ck == nil || !s.keys.fresh(ck, s.keys.now()) {
		hash, t := "", digestTag{}
		if ck != nil {
			hash = ck.hash // stale, but of this secret: no need to hash it again
		} else {
			hash, t = s.keys.secretHash(secret)
		}
		var err error
		if ck, err = s.keys.lookup(s.life, hash); err != nil { // not ctx: see detach
			s.log.Error("api key lookup", "err", err)
			return nil, &APIError{Status: 500, Type: "server_error", Message: "The server could not verify your API key. Please retry."}
		}
		s.keys.remember(ck, t, hash)
	}
	return s.usableKey(ck)
}

// usableKey is the key of lookup ck (ck's own, not to be written), or the
// 401 when there is none or it may not be used now (disabled, expired).
func (s *Server) usableKey(ck *cachedKey) (*storage.APIKey, *APIError) {
	k := &ck.key
	switch {
	case !ck.found:
		return nil, errInvalidKey()
	case k.Disabled:
		return nil, errUnusableKey("is disabled")
	case k.ExpiresAt != nil && !s.now().Before(*k.ExpiresAt):
		return nil, errUnusableKey("has expired")
	}
	return k, nil
}

// recheckKey looks key up again by its hash (through the key cache: a hit
// costs no store read) for a connection authenticated earlier, so a key
// deleted, disabled or expired since is refused as authenticate would
// refuse it, and a changed one (models, limits) applies; errors are
// client-facing. The key returned is the key cache's entry, as authKey's.
func (s *Server) recheckKey(ctx context.Context, key *storage.APIKey) (*storage.APIKey, *APIError) {
	ck, err := s.keys.lookup(s.detach(ctx), key.Hash)
	if err != nil {
		s.log.Error("api key lookup", "err", err)
		return nil, &APIError{Status: 500, Type: "server_error", Message: "The server could not verify your API key. Please retry."}
	}
	return s.usableKey(ck)
}

func modelAllowed(k *storage.APIKey, model string) bool {
	if len(k.Models) == 0 {
		return true
	}
	for _, m := range k.Models {
		if m == model {
			return true
		}
	}
	return false
}
