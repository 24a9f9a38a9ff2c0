package storage

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func randomKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func newSealer(t testing.TB, keys ...[]byte) *Sealer {
	t.Helper()
	s, err := NewSealer(keys[0], keys[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSealOpenRoundTrip(t *testing.T) {
	key := randomKey(t)
	s := newSealer(t, key)
	for _, pt := range []string{"", "x", `{"api_key":"sk-secret-PLAINTEXT-123"}`, strings.Repeat("long", 10000)} {
		sealed, err := s.Seal([]byte(pt))
		if err != nil {
			t.Fatal(err)
		}
		if want := "v1:" + KeyID(key) + ":"; !strings.HasPrefix(sealed, want) {
			t.Errorf("sealed value %.16q… does not start with %q", sealed, want)
		}
		if len(pt) > 8 && strings.Contains(sealed, pt) {
			t.Error("sealed value contains the plaintext")
		}
		got, err := s.Open(sealed)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if string(got) != pt {
			t.Errorf("Open = %q, want %q", got, pt)
		}
		if !s.Current(sealed) {
			t.Error("Current = false for a value just sealed")
		}
	}
	// Random nonces: the same plaintext seals differently.
	a, _ := s.Seal([]byte("same"))
	b, _ := s.Seal([]byte("same"))
	if a == b {
		t.Error("two seals of the same plaintext are identical")
	}
}

func TestOpenTampered(t *testing.T) {
	s := newSealer(t, randomKey(t))
	const secret = "sk-secret-PLAINTEXT-123"
	sealed, err := s.Seal([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(sealed, ':') + 1
	header, payload := sealed[:i], sealed[i:]
	raw, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	// Flip one bit in every byte of nonce, ciphertext and tag.
	for j := range raw {
		c := bytes.Clone(raw)
		c[j] ^= 0x01
		cases = append(cases, header+base64.StdEncoding.EncodeToString(c))
	}
	otherID := KeyID(randomKey(t))
	cases = append(cases,
		"", "v1", "v1:", "v2"+sealed[2:], // version
		"v1:"+otherID+":"+payload,                          // a key id the Sealer lacks
		"v1:kZZZZZZZZ:"+payload,                            // a malformed key id
		header+payload[:len(payload)-4],                    // truncated
		header+"!!!!",                                      // not base64
		header+base64.StdEncoding.EncodeToString(raw[:20]), // shorter than nonce+tag
		header+base64.StdEncoding.EncodeToString(append(bytes.Clone(raw), 0)),
	)
	for _, c := range cases {
		pt, err := s.Open(c)
		if !errors.Is(err, ErrUnseal) {
			t.Errorf("Open(tampered %.40q…) = %q, %v; want ErrUnseal", c, pt, err)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("error leaks the plaintext: %v", err)
		}
	}
	// Sealed under another key and relabelled with this Sealer's key id:
	// authentication fails rather than garbage coming out.
	other := newSealer(t, randomKey(t))
	forged, _ := other.Seal([]byte(secret))
	forged = header + forged[strings.LastIndexByte(forged, ':')+1:]
	if _, err := s.Open(forged); !errors.Is(err, ErrUnseal) {
		t.Errorf("Open(value of another key) err = %v, want ErrUnseal", err)
	}
}

func TestKeyRotation(t *testing.T) {
	oldKey, newKey := randomKey(t), randomKey(t)
	old := newSealer(t, oldKey)
	sealedOld, err := old.Seal([]byte("secret-1"))
	if err != nil {
		t.Fatal(err)
	}
	rotating := newSealer(t, newKey, oldKey)
	if rotating.KeyID() != KeyID(newKey) {
		t.Errorf("KeyID = %s, want the first key's %s", rotating.KeyID(), KeyID(newKey))
	}
	got, err := rotating.Open(sealedOld)
	if err != nil || string(got) != "secret-1" {
		t.Fatalf("Open(old value) with [new, old] = %q, %v", got, err)
	}
	if rotating.Current(sealedOld) {
		t.Error("Current = true for a value under the old key")
	}
	sealedNew, err := rotating.Seal([]byte("secret-2"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sealedNew, "v1:"+KeyID(newKey)+":") {
		t.Errorf("Seal did not use the first key: %.13s", sealedNew)
	}
	if _, err := old.Open(sealedNew); !errors.Is(err, ErrUnseal) {
		t.Errorf("the old-only sealer opened a value of the new key: %v", err)
	}
	newOnly := newSealer(t, newKey)
	if got, err := newOnly.Open(sealedNew); err != nil || string(got) != "secret-2" {
		t.Errorf("new-only Open = %q, %v", got, err)
	}
	if _, err := newOnly.Open(sealedOld); !errors.Is(err, ErrUnseal) {
		t.Errorf("new-only sealer opened an old value: %v", err)
	}
}

func TestNewSealerErrors(t *testing.T) {
	k := randomKey(t)
	for name, keys := range map[string][][]byte{
		"nil":            {nil},
		"short":          {k[:16]},
		"long":           {append(bytes.Clone(k), 0)},
		"short previous": {k, k[:31]},
		"duplicate":      {k, randomKey(t), bytes.Clone(k)},
	} {
		if _, err := NewSealer(keys[0], keys[1:]...); err == nil {
			t.Errorf("NewSealer(%s) succeeded", name)
		}
	}
	// The Sealer keeps its own copy of the key.
	s := newSealer(t, k)
	sealed, _ := s.Seal([]byte("x"))
	clear(k)
	if _, err := s.Open(sealed); err != nil {
		t.Errorf("Open after the caller cleared its key: %v", err)
	}
}

func TestKeyID(t *testing.T) {
	// sha256 of 32 zero bytes = 66687aad…
	if got := KeyID(make([]byte, 32)); got != "k66687aad" {
		t.Errorf("KeyID(zero key) = %s, want k66687aad", got)
	}
}

func TestParseKey(t *testing.T) {
	k := randomKey(t)
	for name, s := range map[string]string{
		"base64":          base64.StdEncoding.EncodeToString(k),
		"base64 raw":      base64.RawStdEncoding.EncodeToString(k),
		"base64 url":      base64.URLEncoding.EncodeToString(k),
		"hex":             hex.EncodeToString(k),
		"HEX":             strings.ToUpper(hex.EncodeToString(k)),
		"with whitespace": "  " + base64.StdEncoding.EncodeToString(k) + "\n",
	} {
		got, err := ParseKey(s)
		if err != nil || !bytes.Equal(got, k) {
			t.Errorf("ParseKey(%s) = %x, %v", name, got, err)
		}
	}
	for name, s := range map[string]string{
		"empty":        "",
		"short base64": base64.StdEncoding.EncodeToString(k[:16]),
		"short hex":    hex.EncodeToString(k[:31]),
		"garbage":      strings.Repeat("z", 64),
		"passphrase":   "correct horse battery staple",
	} {
		_, err := ParseKey(s)
		if err == nil {
			t.Errorf("ParseKey(%s) succeeded", name)
			continue
		}
		if s != "" && strings.Contains(err.Error(), s) {
			t.Errorf("ParseKey(%s) error contains the input: %v", name, err)
		}
	}
}

func TestLoadOrCreateKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "dir", "troupe.key")
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != KeySize {
		t.Fatalf("key has %d bytes", len(k1))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode = %v, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Errorf("key directory mode = %v, want 0700", di.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	if got, err := ParseKey(string(b)); err != nil || !bytes.Equal(got, k1) || len(b) != 45 {
		t.Errorf("key file %q is not the key as base64 and a newline", b)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Errorf("second LoadOrCreateKey = %x, %v; want the same key", k2, err)
	}
	// A key written by an operator in hex is read as is.
	hexPath := filepath.Join(t.TempDir(), "hex.key")
	if err := os.WriteFile(hexPath, []byte(hex.EncodeToString(k1)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := LoadOrCreateKey(hexPath); err != nil || !bytes.Equal(got, k1) {
		t.Errorf("LoadOrCreateKey(hex file) = %x, %v", got, err)
	}
	// A damaged file is an error, never silently replaced.
	bad := filepath.Join(t.TempDir(), "bad.key")
	if err := os.WriteFile(bad, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(bad); err == nil {
		t.Error("LoadOrCreateKey(damaged file) succeeded")
	}
	if b, _ := os.ReadFile(bad); string(b) != "not a key" {
		t.Error("the damaged key file was overwritten")
	}
	// No temporary files are left behind.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("key directory holds %d entries, want 1", len(entries))
	}
}

func TestLoadOrCreateKeyConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "troupe.key")
	const n = 16
	keys := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			k, err := LoadOrCreateKey(path)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	for i := range keys {
		if !bytes.Equal(keys[i], keys[0]) {
			t.Fatalf("caller %d got a different key", i)
		}
	}
}

func TestHashKey(t *testing.T) {
	if got, want := HashKey("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; got != want {
		t.Errorf("HashKey(abc) = %s, want %s", got, want)
	}
}

func TestValidate(t *testing.T) {
	ok := Account{Name: "a", Provider: ProviderOpenAI}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid account: %v", err)
	}
	secret := "sk-troupe-abcdefghijklmnop"
	k := APIKey{Name: "k", Hash: HashKey(secret), Prefix: secret[:12]}
	if err := k.Validate(); err != nil {
		t.Errorf("valid key: %v", err)
	}
	k.Prefix = secret
	if err := k.Validate(); !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), secret) {
		t.Errorf("key with the whole secret as prefix: %v", err)
	}
	k.Prefix, k.Hash = "", secret
	if err := k.Validate(); !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), secret) {
		t.Errorf("key with the secret as hash: %v", err)
	}
	r := UsageRecord{}
	if err := r.Validate(); !errors.Is(err, ErrInvalid) {
		t.Errorf("usage record without id: %v", err)
	}
}

func BenchmarkSealOpen(b *testing.B) {
	s := newSealer(b, randomKey(b))
	pt := []byte(`{"access_token":"eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.payload.signature","refresh_token":"rt_abcdefghijklmnopqrstuvwxyz","account_id":"acct-123"}`)
	b.ReportAllocs()
	for b.Loop() {
		sealed, err := s.Seal(pt)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Open(sealed); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCheckKey(t *testing.T) {
	seq := make([]byte, KeySize)
	for i := range seq {
		seq[i] = byte(3 * i)
	}
	for _, tc := range []struct {
		name string
		key  []byte
		want string
	}{
		{"zeros", make([]byte, KeySize), "distinct"},
		{"two values", bytes.Repeat([]byte{1, 2, 2, 1}, 8), "distinct"},
		{"16-byte pattern", bytes.Repeat([]byte("0123456789abcdef"), 2), "16-byte pattern"},
		{"sequence", seq, "equal steps"},
		{"text", []byte("correct horse battery staple 123"), "printable"},
		{"short", make([]byte, 16), "want 32 bytes"},
	} {
		if err := CheckKey(tc.key); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	for range 10000 { // random keys pass
		k := make([]byte, KeySize)
		rand.Read(k)
		if err := CheckKey(k); err != nil {
			t.Fatalf("random key %x: %v", k, err)
		}
	}
}
