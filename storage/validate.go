package storage

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrInvalid is returned (wrapped, with the reason) by backends when a value
// breaks a rule of the contract: a missing name, an unknown provider, an API
// key hash that is not a SHA-256 hex digest. The admin API can map it to 400.
var ErrInvalid = errors.New("storage: invalid")

// Validate reports whether a can be stored: Name must be non-empty,
// Provider one of the known providers, and BaseURL must not carry
// credentials (http://user:secret@host: BaseURL is stored and shown in the
// clear, credentials belong in Credentials, which are sealed). The error
// wraps ErrInvalid and never contains BaseURL.
func (a *Account) Validate() error {
	if a.Name == "" {
		return fmt.Errorf("%w: account name is empty", ErrInvalid)
	}
	if !a.Provider.Valid() {
		return fmt.Errorf("%w: account %q: unknown provider %q", ErrInvalid, a.Name, a.Provider)
	}
	if URLHasCredentials(a.BaseURL) {
		return fmt.Errorf("%w: account %q: %s", ErrInvalid, a.Name, ErrURLCredentials.Error())
	}
	return nil
}

// ErrURLCredentials says why a base URL with credentials is refused.
var ErrURLCredentials = errors.New("base_url must not carry credentials (user:password@host): it is stored and shown in the clear; put the upstream key in the account's credentials (api_key)")

// URLHasCredentials reports whether raw, a URL, has a user-information part
// (user or user:password before the host).
func URLHasCredentials(raw string) bool {
	if u, err := url.Parse(raw); err == nil {
		return u.User != nil
	}
	// Unparsable: look for an "@" in what would be the authority.
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return false
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return strings.Contains(rest, "@")
}

// RedactURL returns raw with its user-information part, if any, replaced by
// "REDACTED", for showing a URL stored before such URLs were refused.
func RedactURL(raw string) string {
	if !URLHasCredentials(raw) {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "REDACTED"
	}
	u.User = url.User("REDACTED")
	return u.String()
}

// Validate reports whether k can be stored: Name must be non-empty and Hash
// must be 64 lowercase hex digits (HashKey of the secret). As a guard against
// storing a secret by mistake, a Prefix that is itself the whole secret (its
// HashKey equals Hash) is refused. The error wraps ErrInvalid and never
// contains Hash or Prefix.
func (k *APIKey) Validate() error {
	if k.Name == "" {
		return fmt.Errorf("%w: api key name is empty", ErrInvalid)
	}
	if !isSHA256Hex(k.Hash) {
		return fmt.Errorf("%w: api key %q: hash is not 64 lowercase hex digits", ErrInvalid, k.Name)
	}
	if k.Prefix != "" && HashKey(k.Prefix) == k.Hash {
		return fmt.Errorf("%w: api key %q: prefix is the whole secret", ErrInvalid, k.Name)
	}
	return CheckKeyOwner(k)
}

// CheckKeyOwner refuses, as ErrInvalid, an admin key that a user owns: a
// tenant's key must never reach /api/admin (it could top up its own
// balance). Create and update both check it.
func CheckKeyOwner(k *APIKey) error {
	if k.Admin && k.UserID != "" {
		return fmt.Errorf("%w: api key %q: a user's key cannot be an admin key", ErrInvalid, k.Name)
	}
	return nil
}

// Validate reports whether r can be stored: RequestID must be non-empty.
// The error wraps ErrInvalid.
func (r *UsageRecord) Validate() error {
	if r.RequestID == "" {
		return fmt.Errorf("%w: usage record without request id", ErrInvalid)
	}
	return nil
}

// MaxTokens bounds each token count of a usage record: 10^12, far beyond
// any real request, so that no rollup of counts can overflow.
const MaxTokens = 1_000_000_000_000

// Bound clamps r's token counts to [0, MaxTokens] and its Cost to [0,
// MaxAmount], in place, writing only a value out of range (a batch in
// range is only read, so callers may retry one batch from several
// goroutines). InsertUsage applies it before storing: an upstream that
// reports absurd usage must not make the batch fail (its records would be
// lost) nor a sum overflow.
func (r *UsageRecord) Bound() {
	for _, n := range [...]*int64{&r.InputTokens, &r.CachedTokens, &r.OutputTokens, &r.ReasoningTokens, &r.CacheWriteTokens} {
		if *n < 0 || *n > MaxTokens {
			*n = min(max(*n, 0), MaxTokens)
		}
	}
	if r.Cost < 0 || r.Cost > MaxAmount {
		r.Cost = min(max(r.Cost, 0), MaxAmount)
	}
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// NormKeyWeight prepares k's fair-queue Weight for storing: 0 becomes 1 (the
// default); a negative weight is refused with an error wrapping ErrInvalid.
func NormKeyWeight(k *APIKey) error {
	if k.Weight < 0 {
		return fmt.Errorf("%w: api key %q: weight %d is negative", ErrInvalid, k.Name, k.Weight)
	}
	if k.Weight == 0 {
		k.Weight = 1
	}
	return nil
}
