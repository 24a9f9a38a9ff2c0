package storage

import (
	"errors"
	"strings"
	"testing"
)

func TestURLCredentials(t *testing.T) {
	for raw, want := range map[string]string{
		"https://api.example.com/v1":   "",
		"http://user:SECRET@h:8080/v1": "http://REDACTED@h:8080/v1",
		"http://SECRET@h/v1":           "http://REDACTED@h/v1",
		"http://u:SE CRET@h/v1":        "REDACTED", // unparsable, still seen
		"http://h/v1?next=a@b":         "",
		"":                             "",
	} {
		has := URLHasCredentials(raw)
		if has != (want != "") {
			t.Errorf("%q: credentials %v", raw, has)
		}
		if got := RedactURL(raw); want != "" && got != want || want == "" && got != raw {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
		a := Account{Name: "a", Provider: ProviderOpenAI, BaseURL: raw}
		if err := a.Validate(); has != (err != nil) || err != nil && (!errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "SECRET")) {
			t.Errorf("Validate(%q) = %v", raw, err)
		}
	}
}
