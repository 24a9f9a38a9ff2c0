package gateway

import (
	"bytes"
	"context"
	"testing"

	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// A secret's tag is a function of the secret alone (in one process):
// secrets that differ in a byte, in length only (zero padding) or that
// pad to the same blocks all have different tags, and another process's
// key gives other tags.
func TestDigestTags(t *testing.T) {
	d, other := newKeyDigests(), newKeyDigests()
	secrets := [][]byte{nil, {0}, {0, 0}, []byte("a"), []byte("a\x00"), []byte("sk-troupe-0123"), []byte("sk-troupe-0124"),
		bytes.Repeat([]byte("x"), 15), bytes.Repeat([]byte("x"), 16), bytes.Repeat([]byte("x"), 17),
		append(bytes.Repeat([]byte("x"), 16), 0), bytes.Repeat([]byte("y"), 256)}
	seen := map[digestTag]string{}
	for _, s := range secrets {
		tg := d.tag(s)
		if prev, ok := seen[tg]; ok {
			t.Fatalf("%q and %q have one tag", prev, s)
		}
		seen[tg] = string(s)
		if again := d.tag(s); again != tg {
			t.Fatalf("%q: two tags", s)
		}
		if other.tag(s) == tg {
			t.Fatalf("%q: one tag under two keys", s)
		}
	}
}

// A found key's digest is remembered, so its next request does not hash
// it; a made-up key's is not (a flood of them cannot evict the found), and
// an invalidation drops them all.
func TestKeyDigestsRememberFoundKeys(t *testing.T) {
	s, _, key := testServer(t, 1, cannedTransport{})
	if h, _ := s.keys.digests.lookup([]byte(key)); h != "" {
		t.Fatal("a digest remembered before any request")
	}
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.Set("Authorization", "Bearer "+key)
	s.headerReceived(&ctx.Request.Header)
	if h, _ := s.keys.digests.lookup([]byte(key)); h != storage.HashKey(key) {
		t.Fatalf("remembered %q, want the key's digest", h)
	}
	madeUp := KeyPrefix + "made-up"
	ctx.Request.Header.Set("Authorization", "Bearer "+madeUp)
	s.headerReceived(&ctx.Request.Header)
	if _, err := s.authenticate(&ctx); err == nil || err.Status != 401 {
		t.Fatalf("a made-up key: %v", err)
	}
	if h, _ := s.keys.digests.lookup([]byte(madeUp)); h != "" {
		t.Fatal("a made-up key's digest was remembered")
	}
	s.InvalidateKeys()
	if h, _ := s.keys.digests.lookup([]byte(key)); h != "" {
		t.Fatal("an invalidation kept a digest")
	}
}

// A remembered digest never keeps a changed key usable: a key removed,
// disabled or rotated (a new secret, the old hash gone) is refused at the
// first request after the invalidation its change brings (here or, through
// the keys channel, from another instance: both call InvalidateKeys), and
// the rotated key's new secret works.
func TestKeyDigestsFollowKeyChanges(t *testing.T) {
	s, _, key, store := testServerStore(t, 1, cannedTransport{})
	auth := func(secret string) *APIError {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.Set("Authorization", "Bearer "+secret)
		s.headerReceived(&ctx.Request.Header)
		_, err := s.authenticate(&ctx)
		return err
	}
	for range 2 { // the second request rides the remembered digest
		if err := auth(key); err != nil {
			t.Fatal(err)
		}
	}
	old := store.keys[storage.HashKey(key)]

	old.Disabled = true
	store.UpdateAPIKey(context.Background(), old)
	s.InvalidateKeys()
	if err := auth(key); err == nil || err.Status != 401 {
		t.Fatalf("a disabled key: %v", err)
	}
	old.Disabled = false
	store.UpdateAPIKey(context.Background(), old)
	s.InvalidateKeys()
	if err := auth(key); err != nil {
		t.Fatalf("re-enabled: %v", err)
	}

	// Rotation: the old secret's hash goes, a new secret comes.
	secret, k, err := NewKey("rotated")
	if err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	delete(store.keys, old.Hash)
	store.mu.Unlock()
	store.CreateAPIKey(context.Background(), k)
	s.InvalidateKeys()
	if err := auth(key); err == nil || err.Status != 401 {
		t.Fatalf("a rotated key's old secret: %v", err)
	}
	for range 2 {
		if err := auth(secret); err != nil {
			t.Fatalf("a rotated key's new secret: %v", err)
		}
	}
}

// A known key's digest costs no allocation (storage.HashKeyBytes
// allocates its hex string).
func TestKeyDigestAllocs(t *testing.T) {
	d := newKeyDigests()
	secret := []byte(KeyPrefix + "0123456789012345678901234567890123456789")
	_, tg := d.lookup(secret)
	d.remember(tg, storage.HashKeyBytes(secret))
	if n := testing.AllocsPerRun(100, func() {
		if h, _ := d.lookup(secret); h == "" {
			t.Fatal("forgotten")
		}
	}); n != 0 {
		t.Fatalf("%v allocations a lookup", n)
	}
}

// BenchmarkSecretHash is the digest of a key's secret: computed
// (storage.HashKeyBytes) against remembered (keyDigests: its MAC and the
// shard's lookup).
func BenchmarkSecretHash(b *testing.B) {
	secret := []byte(KeyPrefix + "0123456789012345678901234567890123456789")
	b.Run("HashKeyBytes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = storage.HashKeyBytes(secret)
		}
	})
	b.Run("remembered", func(b *testing.B) {
		d := newKeyDigests()
		_, tg := d.lookup(secret)
		d.remember(tg, storage.HashKeyBytes(secret))
		b.ReportAllocs()
		for b.Loop() {
			if h, _ := d.lookup(secret); h == "" {
				b.Fatal("forgotten")
			}
		}
	})
}
