package gateway

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

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
	now         func() time.Time
}

type cachedKey struct {
	key     storage.APIKey
	found   bool
	expires time.Time
}

func (c *keyCache) lookup(ctx context.Context, hash string) (storage.APIKey, bool, error) {
	now := c.now()
	if v, ok := c.entries.Load(hash); ok {
		ck := v.(*cachedKey)
		if now.Before(ck.expires) {
			return ck.key, ck.found, nil
		}
	}
	k, err := c.store.APIKeyByHash(ctx, hash)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		c.put(hash, &cachedKey{expires: now.Add(c.negativeTTL)})
		return storage.APIKey{}, false, nil
	case err != nil:
		return storage.APIKey{}, false, err
	}
	c.put(hash, &cachedKey{key: k, found: true, expires: now.Add(c.positiveTTL)})
	return k, true, nil
}

// invalidate drops every cached entry (after a key was created, changed or removed).
func (c *keyCache) invalidate() {
	c.entries.Clear()
	c.size.Store(0)
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

var (
	bearerPrefix = []byte("Bearer ")
	headerAPIKey = []byte("x-api-key")
)

// clientSecret returns the API key the client sent: "Authorization: Bearer K"
// (OpenAI) or "x-api-key: K" (Anthropic).
func clientSecret(ctx *fasthttp.RequestCtx) []byte {
	if a := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization); len(a) > len(bearerPrefix) &&
		bytes.EqualFold(a[:len(bearerPrefix)], bearerPrefix) {
		return bytes.TrimSpace(a[len(bearerPrefix):])
	}
	return bytes.TrimSpace(ctx.Request.Header.PeekBytes(headerAPIKey))
}

// authenticate resolves the client's key; errors are client-facing.
func (s *Server) authenticate(ctx *fasthttp.RequestCtx) (storage.APIKey, *APIError) {
	secret := clientSecret(ctx)
	if len(secret) == 0 {
		if anthropicClient(ctx) {
			return storage.APIKey{}, &APIError{Status: 401, Type: "authentication_error", Code: "missing_api_key",
				Message: "x-api-key header is required (or Authorization: Bearer YOUR_KEY)."}
		}
		return storage.APIKey{}, errMissingKey()
	}
	if !bytes.HasPrefix(secret, []byte(KeyPrefix)) || len(secret) > 256 {
		return storage.APIKey{}, errInvalidKey()
	}
	k, found, err := s.keys.lookup(ctx, storage.HashKey(string(secret)))
	if err != nil {
		s.log.Error("api key lookup", "err", err)
		return storage.APIKey{}, &APIError{Status: 500, Type: "server_error", Message: "The server could not verify your API key. Please retry."}
	}
	if !found || k.Disabled || (k.ExpiresAt != nil && !s.now().Before(*k.ExpiresAt)) {
		return storage.APIKey{}, errInvalidKey()
	}
	return k, nil
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
