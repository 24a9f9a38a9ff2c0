package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A failed request reaches the request log of the real store: the usage
// totals count it as an error, ?failed=1 and ?status= find it, and the
// token sums are the successful request's alone. A bad key (401) is not
// logged.
func TestRequestLogCountsFailures(t *testing.T) {
	d := startTestDemo(t, nil, tuned(span(1, 4, 1), nil))
	key := adminKey(t, d)
	if resp, body := d.post(t, "/v1/chat/completions", `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`); resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	resp, body := d.post(t, "/v1/chat/completions", `{"model":"no-such-model","messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 404 {
		t.Fatalf("unknown model: %d %s", resp.StatusCode, body)
	}
	failedID := resp.Header.Get("X-Request-Id")
	if r, _ := d.do(t, "POST", "/v1/chat/completions", strings.NewReader(`{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`),
		map[string]string{"Authorization": "Bearer sk-troupe-not-a-key", "Content-Type": "application/json"}); r.StatusCode != 401 {
		t.Fatalf("bad key: %d", r.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.app.sys.FlushUsage(ctx); err != nil {
		t.Fatal(err)
	}
	st, m := d.admin(t, "GET", "/api/admin/usage", key, "")
	if st != 200 {
		t.Fatalf("usage: %d %v", st, m)
	}
	total := m["total"].(map[string]any)
	if total["requests"].(float64) != 2 || total["errors"].(float64) != 1 || total["input_tokens"].(float64) <= 0 {
		t.Errorf("usage total %v, want 2 requests, 1 error, the success's tokens", total)
	}
	for _, q := range []string{"?failed=1", "?status=404"} {
		st, m = d.admin(t, "GET", "/api/admin/usage/requests"+q, key, "")
		rs, _ := m["records"].([]any)
		if st != 200 || len(rs) != 1 {
			t.Fatalf("requests%s: %d %v", q, st, m)
		}
		r := rs[0].(map[string]any)
		if r["request_id"] != failedID || r["status"].(float64) != 404 || r["input_tokens"].(float64) != 0 || r["output_tokens"].(float64) != 0 {
			t.Errorf("requests%s: record %v, want %s with status 404 and no tokens", q, r, failedID)
		}
	}
}
