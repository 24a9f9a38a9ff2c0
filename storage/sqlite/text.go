package sqlite

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/troupe-gw/troupe/storage"
)

// The PostgreSQL backend cannot store text that is not valid UTF-8 or holds
// a NUL byte; this backend applies the same rules so that both behave alike:
// values written by operators (names, settings, policies) that have them are
// refused with storage.ErrInvalid; usage records, whose model name a client
// chooses, are stored with U+FFFD in place of the bad bytes (see cleanText).

// utf8Clean reports whether s is valid UTF-8 without NUL bytes.
func utf8Clean(s string) bool { return strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) }

// cleanText returns s with invalid UTF-8 and NUL bytes replaced by U+FFFD,
// or s itself when it is already clean (the common case, without allocating).
func cleanText(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == 0 || c >= utf8.RuneSelf {
			if utf8Clean(s) {
				return s
			}
			return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
		}
	}
	return s
}

// textOK reports whether every string of ss is valid UTF-8 without NUL bytes.
func textOK(ss ...string) bool {
	for _, s := range ss {
		if !utf8Clean(s) {
			return false
		}
	}
	return true
}

// checkAccountText refuses, as storage.ErrInvalid, an account with text
// PostgreSQL cannot store (credentials excepted: they are sealed).
func checkAccountText(a *storage.Account) error {
	if !textOK(a.ID, a.Name, a.BaseURL, a.Group) || !textOK(a.Models...) || !textOK(a.Tags...) {
		return fmt.Errorf("%w: account %q: text that is not valid UTF-8 (or holds a NUL byte)", storage.ErrInvalid, a.Name)
	}
	return nil
}

// checkKeyText refuses, as storage.ErrInvalid, an API key with text
// PostgreSQL cannot store.
func checkKeyText(k *storage.APIKey) error {
	if !textOK(k.ID, k.Name, k.Prefix, k.Group) || !textOK(k.Models...) {
		return fmt.Errorf("%w: api key %q: text that is not valid UTF-8 (or holds a NUL byte)", storage.ErrInvalid, k.Name)
	}
	return nil
}
