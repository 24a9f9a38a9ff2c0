package fleet

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func newTestCodec(t *testing.T, key []byte, now *time.Time) *Codec {
	t.Helper()
	c, err := NewCodec(key)
	if err != nil {
		t.Fatal(err)
	}
	c.Now = func() time.Time { return *now }
	return c
}

// TestCodecRefuses: a message verifies once under the key that signed it;
// a forged signature, an altered body or path, a replayed nonce, a stale
// or future timestamp and another deployment's key are each refused with
// their reason.
func TestCodecRefuses(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	a := newTestCodec(t, testKey(1), &now)
	b := newTestCodec(t, testKey(1), &now) // the same deployment, another instance
	body := []byte(`{"account":"acc-1","model":"gpt-4.1-mini"}`)

	env := a.Sign("gw-1", PathGrant, body)
	if err := b.Verify(env, PathGrant, body); err != nil {
		t.Fatalf("a good message refused: %v", err)
	}
	if err := b.Verify(env, PathGrant, body); !errors.Is(err, ErrReplayed) {
		t.Errorf("replayed nonce: %v, want ErrReplayed", err)
	}

	orig := a.Sign("gw-1", PathGrant, body)
	forged := orig
	sig := []byte(forged.Signature)
	if sig[0] == '0' {
		sig[0] = '1'
	} else {
		sig[0] = '0'
	}
	forged.Signature = string(sig)
	if err := b.Verify(forged, PathGrant, body); !errors.Is(err, ErrForged) {
		t.Errorf("forged signature: %v, want ErrForged", err)
	}
	// The forged message did not spend its nonce: the genuine one passes.
	if err := b.Verify(orig, PathGrant, body); err != nil {
		t.Errorf("the genuine message after a forgery with its nonce: %v", err)
	}

	altered := a.Sign("gw-1", PathGrant, body)
	if err := b.Verify(altered, PathGrant, []byte(`{"account":"acc-2","model":"gpt-4.1-mini"}`)); !errors.Is(err, ErrForged) {
		t.Errorf("altered body: %v, want ErrForged", err)
	}
	if err := b.Verify(altered, PathRelease, body); !errors.Is(err, ErrForged) {
		t.Errorf("other path: %v, want ErrForged", err)
	}
	sender := a.Sign("gw-1", PathGrant, body)
	sender.Sender = "gw-2"
	if err := b.Verify(sender, PathGrant, body); !errors.Is(err, ErrForged) {
		t.Errorf("other sender: %v, want ErrForged", err)
	}

	other := newTestCodec(t, testKey(2), &now) // another deployment's master key
	if err := b.Verify(other.Sign("gw-1", PathGrant, body), PathGrant, body); !errors.Is(err, ErrForged) {
		t.Errorf("wrong key: %v, want ErrForged", err)
	}

	old := a.Sign("gw-1", PathGrant, body)
	now = now.Add(DefaultSkew + time.Millisecond)
	if err := b.Verify(old, PathGrant, body); !errors.Is(err, ErrStale) {
		t.Errorf("stale timestamp: %v, want ErrStale", err)
	}
	future := a.Sign("gw-1", PathGrant, body)
	now = now.Add(-2 * (DefaultSkew + time.Millisecond))
	if err := b.Verify(future, PathGrant, body); !errors.Is(err, ErrStale) {
		t.Errorf("future timestamp: %v, want ErrStale", err)
	}

	for _, e := range []Envelope{{}, {Sender: "gw-1", Time: "x", Nonce: env.Nonce, Signature: env.Signature},
		{Sender: "gw-1", Time: env.Time, Nonce: "short", Signature: env.Signature},
		{Sender: "gw-1", Time: env.Time, Nonce: env.Nonce, Signature: "zz" + env.Signature[2:]}} {
		if err := b.Verify(e, PathGrant, body); !errors.Is(err, ErrMalformed) {
			t.Errorf("malformed %+v: %v, want ErrMalformed", e, err)
		}
	}
	for err, want := range map[error]string{ErrMalformed: "malformed", ErrStale: "stale", ErrForged: "forged", ErrReplayed: "replayed"} {
		if got := Reason(err); got != want {
			t.Errorf("Reason(%v) = %q, want %q", err, got, want)
		}
	}
}

// TestCodecNoncesExpire: a nonce is remembered while its timestamp could
// still pass, and forgotten after, so memory stays bounded.
func TestCodecNoncesExpire(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c := newTestCodec(t, testKey(1), &now)
	for range 100 {
		if err := c.Verify(c.Sign("gw-1", PathGrant, nil), PathGrant, nil); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(3 * DefaultSkew)
	if err := c.Verify(c.Sign("gw-1", PathGrant, nil), PathGrant, nil); err != nil {
		t.Fatal(err)
	}
	if n := len(c.seen); n != 1 {
		t.Errorf("%d nonces remembered after they expired, want 1", n)
	}
}

// TestCodecSeal: a sealed credential opens only with the same key and the
// same binding; the sealed bytes do not contain the plaintext.
func TestCodecSeal(t *testing.T) {
	now := time.Now()
	a, b := newTestCodec(t, testKey(1), &now), newTestCodec(t, testKey(1), &now)
	secret := []byte(`{"api_key":"sk-upstream-secret"}`)
	sealed := a.Seal(secret, []byte("handle-1"))
	if bytes.Contains(sealed, []byte("sk-upstream-secret")) {
		t.Fatal("the sealed value holds the plaintext")
	}
	got, err := b.Open(sealed, []byte("handle-1"))
	if err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := b.Open(sealed, []byte("handle-2")); !errors.Is(err, ErrOpen) {
		t.Errorf("other binding: %v, want ErrOpen", err)
	}
	if _, err := newTestCodec(t, testKey(2), &now).Open(sealed, []byte("handle-1")); !errors.Is(err, ErrOpen) {
		t.Errorf("wrong key: %v, want ErrOpen", err)
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := b.Open(sealed, []byte("handle-1")); !errors.Is(err, ErrOpen) {
		t.Errorf("altered: %v, want ErrOpen", err)
	}
	if _, err := NewCodec(make([]byte, 16)); err == nil {
		t.Error("a 16-byte master key accepted")
	}
}
