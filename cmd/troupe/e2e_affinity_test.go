package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

var servedBy = regexp.MustCompile(`demo-\d{4}`)

// checkAffinity sends a Responses request, then follow-ups naming it in
// previous_response_id: each must be served by the account that served the
// first (its state lives there).
func checkAffinity(t *testing.T, d *testDemo, key string) {
	t.Helper()
	post := func(body string) (string, string) {
		resp, b := d.do(t, "POST", "/v1/responses", stringsReader(body), map[string]string{
			"Authorization": "Bearer " + key, "Content-Type": "application/json"})
		if resp.StatusCode != 200 {
			t.Fatalf("responses: %d %s", resp.StatusCode, b)
		}
		return gjson.GetBytes(b, "id").String(), servedBy.FindString(gjson.GetBytes(b, "output.0.content.0.text").String())
	}
	id, first := post(`{"model":"gpt-4.1-mini","input":"hi"}`)
	if id == "" || first == "" {
		t.Fatalf("no id (%q) or account (%q) in the first answer", id, first)
	}
	for i := range 10 {
		next, acc := post(fmt.Sprintf(`{"model":"gpt-4.1-mini","input":"again","previous_response_id":%q}`, id))
		if acc != first {
			t.Fatalf("follow-up %d of %s served by %s, want %s", i, id, acc, first)
		}
		id = next
	}
}

func TestResponseAffinity(t *testing.T) {
	d := startTestDemo(t, nil, tuned(span(2, 8, 2), nil))
	checkAffinity(t, d, d.apiKey)
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
