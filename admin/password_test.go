package admin

import (
	"strings"
	"testing"
)

// Common passwords, words with digits, repeats and sequences are refused
// by the lists and patterns shipped in the binary; passphrases and
// generated passwords pass. The list before held six names.
func TestCheckPassword(t *testing.T) {
	for _, pw := range []string{"password1234", "changeme1234", "aaaaaaaaaaaa", "123456789012", "qwertyuiop12",
		"Password2024!", "iloveyou2020", "administrator1", "troupetroupe", strings.Repeat("ab", 600)[:1000]} {
		if err := CheckPassword(pw); err == nil || !strings.Contains(err.Error(), "too easy to guess") {
			t.Errorf("%q: %v, want refused as too easy", pw, err)
		}
	}
	for _, pw := range []string{testAdminPassword, "kX9#mP2$vL7q", "a new long password", "zebra kettle orbit 42"} {
		if err := CheckPassword(pw); err != nil {
			t.Errorf("%q: %v, want accepted", pw, err)
		}
	}
	if err := CheckPassword("short"); err == nil || !strings.Contains(err.Error(), "at least 12") {
		t.Errorf("short: %v", err)
	}
	if err := CheckPassword(strings.Repeat("x", maxPasswordBytes+1)); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("too long: %v", err)
	}
}
