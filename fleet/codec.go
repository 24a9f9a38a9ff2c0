package fleet

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// The codec of the messages between instances (docs/fleet.md, "The
// internal endpoint"): every message carries its sender, a timestamp, a
// nonce and an HMAC-SHA256 over them, the path and the body, keyed by a
// key derived with HKDF-SHA256 from the deployment's master key; secrets
// in a message (an account's credentials) are sealed besides with
// AES-256-GCM under a second derived key, since the channel is plain HTTP.

// HKDF info strings of the derived keys; a new version of the protocol
// takes new keys.
const (
	macInfo  = "troupe fleet v1 message mac"
	sealInfo = "troupe fleet v1 credential seal"
)

// DefaultSkew is the default Codec.Skew: how far a message's timestamp may
// be from the receiver's clock.
const DefaultSkew = 10 * time.Second

// Message refusal reasons, as the metrics name them (Refusal.Reason).
var (
	// ErrMalformed: a header is missing or unreadable.
	ErrMalformed = errors.New("fleet: malformed message")
	// ErrStale: the timestamp is further than Skew from the receiver's clock.
	ErrStale = errors.New("fleet: stale message")
	// ErrForged: the signature does not match (forged, altered, or signed
	// with another deployment's key).
	ErrForged = errors.New("fleet: forged message")
	// ErrReplayed: a message with this nonce was accepted already.
	ErrReplayed = errors.New("fleet: replayed message")
)

// Reason returns the metric label of a Verify error: "malformed",
// "stale", "forged" or "replayed"; "other" for anything else.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrMalformed):
		return "malformed"
	case errors.Is(err, ErrStale):
		return "stale"
	case errors.Is(err, ErrForged):
		return "forged"
	case errors.Is(err, ErrReplayed):
		return "replayed"
	}
	return "other"
}

// Envelope is the authentication of one message, sent as HTTP headers
// (X-Troupe-Fleet-Sender, -Time, -Nonce, -Signature).
type Envelope struct {
	Sender    string // the sending member's ID
	Time      string // Unix milliseconds, decimal
	Nonce     string // 16 random bytes, hex
	Signature string // HMAC-SHA256, hex
}

// Header names of an Envelope.
const (
	HeaderSender    = "X-Troupe-Fleet-Sender"
	HeaderTime      = "X-Troupe-Fleet-Time"
	HeaderNonce     = "X-Troupe-Fleet-Nonce"
	HeaderSignature = "X-Troupe-Fleet-Signature"
)

// Codec signs and verifies messages and seals secrets, with keys derived
// from one master key. Safe for concurrent use.
type Codec struct {
	mac  []byte
	aead cipher.AEAD
	// Skew is how far a timestamp may be from the receiver's clock
	// (DefaultSkew when 0); nonces are remembered twice as long.
	Skew time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time

	mu     sync.Mutex
	seen   map[string]int64 // nonce → Unix ms until which it is remembered
	pruned int64
}

// NewCodec derives the codec's keys from master (the deployment's
// storage.master_key, 32 bytes or more).
func NewCodec(master []byte) (*Codec, error) {
	if len(master) < 32 {
		return nil, fmt.Errorf("fleet: master key of %d bytes, want 32", len(master))
	}
	mac, err := hkdf.Key(sha256.New, master, nil, macInfo, 32)
	if err != nil {
		return nil, err
	}
	sk, err := hkdf.Key(sha256.New, master, nil, sealInfo, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(sk)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Codec{mac: mac, aead: aead, seen: make(map[string]int64)}, nil
}

func (c *Codec) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Codec) skew() time.Duration {
	if c.Skew > 0 {
		return c.Skew
	}
	return DefaultSkew
}

// Sign returns the envelope of a message from sender to path with body.
func (c *Codec) Sign(sender, path string, body []byte) Envelope {
	var n [16]byte
	_, _ = rand.Read(n[:])
	e := Envelope{Sender: sender, Time: strconv.FormatInt(c.now().UnixMilli(), 10), Nonce: hex.EncodeToString(n[:])}
	e.Signature = hex.EncodeToString(c.sum(e, path, body))
	return e
}

// sum is the HMAC of a message: its envelope (less the signature), path and body.
func (c *Codec) sum(e Envelope, path string, body []byte) []byte {
	h := hmac.New(sha256.New, c.mac)
	for _, s := range [...]string{"troupe-fleet-v1", path, e.Sender, e.Time, e.Nonce} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks the envelope of a message to path with body: well formed,
// timestamp within Skew, signature right, nonce never accepted before (in
// that order: a forged message cannot fill the nonce memory). Errors wrap
// ErrMalformed, ErrStale, ErrForged or ErrReplayed; they name no secret.
func (c *Codec) Verify(e Envelope, path string, body []byte) error {
	if e.Sender == "" || len(e.Sender) > 256 || len(e.Nonce) != 32 || len(e.Signature) != 64 {
		return ErrMalformed
	}
	ms, err := strconv.ParseInt(e.Time, 10, 64)
	if err != nil {
		return ErrMalformed
	}
	sig, err := hex.DecodeString(e.Signature)
	if err != nil {
		return ErrMalformed
	}
	now := c.now().UnixMilli()
	skew := c.skew().Milliseconds()
	if ms < now-skew || ms > now+skew {
		return ErrStale
	}
	if !hmac.Equal(sig, c.sum(e, path, body)) {
		return ErrForged
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if now-c.pruned > skew {
		for n, until := range c.seen {
			if until < now {
				delete(c.seen, n)
			}
		}
		c.pruned = now
	}
	if _, dup := c.seen[e.Nonce]; dup {
		return ErrReplayed
	}
	// Remembered until its timestamp is stale on this clock, and a skew more.
	c.seen[e.Nonce] = ms + 2*skew
	return nil
}

// Seal encrypts and authenticates plaintext bound to aad (AES-256-GCM,
// random nonce): nonce | ciphertext | tag.
func (c *Codec) Seal(plaintext, aad []byte) []byte {
	n := make([]byte, c.aead.NonceSize(), c.aead.NonceSize()+len(plaintext)+c.aead.Overhead())
	_, _ = rand.Read(n)
	return c.aead.Seal(n, n, plaintext, aad)
}

// ErrOpen is Open's error: the sealed value is malformed, altered, bound
// to other data, or sealed under another key.
var ErrOpen = errors.New("fleet: cannot open sealed value")

// Open reverses Seal.
func (c *Codec) Open(sealed, aad []byte) ([]byte, error) {
	ns := c.aead.NonceSize()
	if len(sealed) < ns+c.aead.Overhead() {
		return nil, ErrOpen
	}
	out, err := c.aead.Open(nil, sealed[:ns], sealed[ns:], aad)
	if err != nil {
		return nil, ErrOpen
	}
	return out, nil
}
