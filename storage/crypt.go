package storage

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeySize is the length in bytes of a sealing key (AES-256).
const KeySize = 32

// sealVersion prefixes every sealed value.
const sealVersion = "v1"

// ErrUnseal is returned (wrapped) by Sealer.Open when a value is malformed,
// names a key the Sealer does not hold, or fails authentication (tampered or
// sealed with a different key).
var ErrUnseal = errors.New("storage: cannot open sealed value")

// Sealer encrypts and authenticates small secrets (upstream credentials) for
// storage at rest with AES-256-GCM. It holds an ordered list of keys: the first
// seals, all of them open. A Sealer is immutable and safe for concurrent use.
//
// A sealed value is the string
//
//	v1:k<8 hex>:<base64 std(nonce | ciphertext | tag)>
//
// where "v1" is the format version, "k<8 hex>" is the key id (KeyID: the first
// four bytes of SHA-256 of the raw 32-byte key, so an operator can tell which
// key sealed a value) and the payload is AES-256-GCM with a random 12-byte
// nonce. The header "v1:k<8 hex>:" is authenticated as additional data, so
// neither the version nor the key id can be altered without Open failing.
//
// Key rotation: build the Sealer with the new key first and the old keys after
// it (NewSealer(newKey, oldKey)). Seal always uses the first key; Open picks
// the key named by the value's key id, so values sealed with any listed key
// still open. Backends re-seal a value whenever they write it, so once every
// row has been rewritten (for example by re-saving each account) the old key
// can be dropped; Current tells whether a value already uses the first key.
type Sealer struct {
	primary sealKey
	byID    map[string]cipher.AEAD
}

type sealKey struct {
	id   string // "k" + 8 hex digits
	aead cipher.AEAD
}

// NewSealer returns a Sealer that seals with key and opens values sealed with
// key or any of previous (older keys kept for rotation, newest first). Every
// key must be exactly KeySize (32) bytes; two keys with the same key id (the
// same key given twice) are refused. The keys are copied.
func NewSealer(key []byte, previous ...[]byte) (*Sealer, error) {
	s := &Sealer{byID: make(map[string]cipher.AEAD, 1+len(previous))}
	for i, k := range append([][]byte{key}, previous...) {
		if len(k) != KeySize {
			return nil, fmt.Errorf("storage: sealing key %d: want %d bytes, got %d", i, KeySize, len(k))
		}
		block, err := aes.NewCipher(bytes.Clone(k))
		if err != nil {
			return nil, fmt.Errorf("storage: sealing key %d: %w", i, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("storage: sealing key %d: %w", i, err)
		}
		id := KeyID(k)
		if _, dup := s.byID[id]; dup {
			return nil, fmt.Errorf("storage: sealing key %d: duplicate key id %s", i, id)
		}
		s.byID[id] = aead
		if i == 0 {
			s.primary = sealKey{id: id, aead: aead}
		}
	}
	return s, nil
}

// KeyID returns the id under which key's sealed values are labelled:
// "k" followed by the first 8 lowercase hex digits of SHA-256(key).
// It reveals nothing useful about a random key and is safe to log.
func KeyID(key []byte) string {
	sum := sha256.Sum256(key)
	return "k" + hex.EncodeToString(sum[:4])
}

// KeyID returns the id of the key that Seal uses (see the package-level KeyID).
func (s *Sealer) KeyID() string { return s.primary.id }

// Seal encrypts plaintext with the first key and returns the self-describing
// string "v1:k<8 hex>:<base64>" described on Sealer.
// The result is about 4/3 of len(plaintext)+28 plus a 13-byte header. Seal fails
// only if the system's random source fails.
func (s *Sealer) Seal(plaintext []byte) (string, error) {
	header := sealVersion + ":" + s.primary.id + ":"
	aead := s.primary.aead
	buf := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("storage: seal: read nonce: %w", err)
	}
	buf = aead.Seal(buf, buf, plaintext, []byte(header))
	return header + base64.StdEncoding.EncodeToString(buf), nil
}

// Open decrypts a value made by Seal with any of the Sealer's keys. It returns
// an error wrapping ErrUnseal when the value is malformed, names a key id the
// Sealer does not hold, or fails authentication. Errors never contain the value.
func (s *Sealer) Open(sealed string) ([]byte, error) {
	version, rest, ok := strings.Cut(sealed, ":")
	if !ok || version != sealVersion {
		return nil, fmt.Errorf("%w: unknown format", ErrUnseal)
	}
	id, payload, ok := strings.Cut(rest, ":")
	if !ok || !validKeyID(id) {
		return nil, fmt.Errorf("%w: malformed key id", ErrUnseal)
	}
	aead, ok := s.byID[id]
	if !ok {
		return nil, fmt.Errorf("%w: no key with id %s", ErrUnseal, id)
	}
	raw, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return nil, fmt.Errorf("%w: bad base64", ErrUnseal)
	}
	if len(raw) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: too short", ErrUnseal)
	}
	nonce, ct := raw[:aead.NonceSize()], raw[aead.NonceSize():]
	header := sealed[:len(version)+1+len(id)+1]
	pt, err := aead.Open(ct[:0], nonce, ct, []byte(header))
	if err != nil {
		return nil, fmt.Errorf("%w: authentication failed (key %s)", ErrUnseal, id)
	}
	return pt, nil
}

// Current reports whether sealed was made with the Sealer's first key, that is
// whether re-sealing it would change the key it is under. It does not verify
// the value; Open does.
func (s *Sealer) Current(sealed string) bool {
	return strings.HasPrefix(sealed, sealVersion+":"+s.primary.id+":")
}

func validKeyID(id string) bool {
	if len(id) != 9 || id[0] != 'k' {
		return false
	}
	for _, c := range []byte(id[1:]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ParseKey decodes a sealing key given in configuration or the environment:
// 64 hex digits or standard (or URL-safe) base64 of 32 bytes (44 characters
// with padding, 43 without). Surrounding white space is ignored. Errors never
// contain s.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if len(s) == 2*KeySize {
		if k, err := hex.DecodeString(s); err == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{
		base64.StdEncoding, base64.RawStdEncoding,
		base64.URLEncoding, base64.RawURLEncoding,
	} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == KeySize {
			return k, nil
		}
	}
	return nil, fmt.Errorf("storage: parse key: want %d bytes as base64 (44 chars) or hex (64 chars), got %d chars", KeySize, len(s))
}

// CheckKey reports whether sealing key k looks like random bytes, as a
// key must (LoadOrCreateKey makes one; so does "openssl rand -base64 32").
// A key written by hand or derived from a pattern is as guessable as the
// pattern, so CheckKey refuses a key of another size, one with fewer than
// 16 distinct byte values (32 zero bytes has one), one that repeats a
// pattern of up to 16 bytes, one that counts in equal steps (00 01 02 …),
// and one that is all printable ASCII (a passphrase, not random bytes).
// 32 random bytes fail one of these with a probability under 10^-13
// (printable text: (95/256)^32); expected are 30 distinct values. The
// error says why, without the key.
func CheckKey(k []byte) error {
	if len(k) != KeySize {
		return fmt.Errorf("storage: key: want %d bytes, got %d", KeySize, len(k))
	}
	var seen [256]bool
	distinct := 0
	for _, b := range k {
		if !seen[b] {
			seen[b] = true
			distinct++
		}
	}
	if distinct < 16 {
		return fmt.Errorf("storage: key has %d distinct byte values of %d; a random key has about 30: generate one (openssl rand -base64 32)", distinct, KeySize)
	}
	for p := 1; p <= KeySize/2; p++ {
		if bytes.Equal(k[p:], k[:len(k)-p]) {
			return fmt.Errorf("storage: key repeats a %d-byte pattern: generate a random one (openssl rand -base64 32)", p)
		}
	}
	step, counting, printable := k[1]-k[0], true, true
	for i, b := range k {
		if i > 0 && b-k[i-1] != step {
			counting = false
		}
		if b < 0x20 || b > 0x7e {
			printable = false
		}
	}
	switch {
	case counting:
		return errors.New("storage: key counts in equal steps: generate a random one (openssl rand -base64 32)")
	case printable:
		return errors.New("storage: key is printable text, not random bytes: generate a random one (openssl rand -base64 32)")
	}
	return nil
}

// LoadOrCreateKey returns the sealing key stored in the file at path (base64
// or hex, as accepted by ParseKey). When the file does not exist it creates a
// new random key, writing it as base64 plus a newline with permissions 0600
// (and the missing parent directories with 0700), so the embedded default
// needs no set-up. Creation is atomic: concurrent callers for the same path
// all end up with the same key. Keep the file out of the database's backups:
// whoever holds both can read every credential. Errors never contain the key.
func LoadOrCreateKey(path string) ([]byte, error) {
	key, err := readKeyFile(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("storage: create key directory: %w", err)
	}
	key = make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("storage: generate key: %w", err)
	}
	// Write a temporary file in full, then hard-link it into place: the link
	// fails if another process won the race, and a reader never sees a
	// half-written key.
	tmp, err := os.CreateTemp(dir, ".troupe-key-*")
	if err != nil {
		return nil, fmt.Errorf("storage: create key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("storage: create key file: %w", err)
	}
	_, err = tmp.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("storage: write key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return readKeyFile(path)
		}
		return nil, fmt.Errorf("storage: install key file: %w", err)
	}
	return key, nil
}

func readKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("storage: read key file: %w", err)
	}
	key, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("storage: key file %s: %w", path, err)
	}
	return key, nil
}
