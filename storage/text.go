package storage

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text rules shared by every backend. PostgreSQL text cannot hold invalid
// UTF-8 or NUL bytes, and the SQLite backend applies the same rules so both
// behave alike: values written by operators (names, settings, policies) that
// have them are refused with ErrInvalid; usage records, whose model name a
// client chooses, are stored with U+FFFD in place of the bad bytes (CleanText).

// TextOK reports whether every string of ss is valid UTF-8 without NUL bytes.
func TextOK(ss ...string) bool {
	for _, s := range ss {
		if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// CleanText returns s with invalid UTF-8 and NUL bytes replaced by U+FFFD,
// or s itself when it is already clean (the common case, without allocating).
func CleanText(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == 0 || c >= utf8.RuneSelf {
			if TextOK(s) {
				return s
			}
			return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
		}
	}
	return s
}

// MaxGroupBytes bounds a routing group's name, on accounts and API keys.
const MaxGroupBytes = 200

// CheckAccountText refuses, as ErrInvalid, an account with text a backend
// cannot store (credentials excepted: they are sealed) or a group longer
// than MaxGroupBytes.
func CheckAccountText(a *Account) error {
	if !TextOK(a.ID, a.Name, a.BaseURL, a.Group) || !TextOK(a.Models...) || !TextOK(a.Tags...) {
		return fmt.Errorf("%w: account %q: text that is not valid UTF-8 (or holds a NUL byte)", ErrInvalid, a.Name)
	}
	if len(a.Group) > MaxGroupBytes {
		return fmt.Errorf("%w: account %q: group of %d bytes, at most %d", ErrInvalid, a.Name, len(a.Group), MaxGroupBytes)
	}
	return nil
}

// CheckKeyText refuses, as ErrInvalid, an API key with text a backend
// cannot store or a group longer than MaxGroupBytes.
func CheckKeyText(k *APIKey) error {
	if !TextOK(k.ID, k.Name, k.Prefix, k.Group, k.UserID) || !TextOK(k.Models...) {
		return fmt.Errorf("%w: api key %q: text that is not valid UTF-8 (or holds a NUL byte)", ErrInvalid, k.Name)
	}
	if len(k.Group) > MaxGroupBytes {
		return fmt.Errorf("%w: api key %q: group of %d bytes, at most %d", ErrInvalid, k.Name, len(k.Group), MaxGroupBytes)
	}
	return nil
}
