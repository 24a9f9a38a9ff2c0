package admin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// GET /api/admin/ops/series sums the request log of the window in buckets:
// requests, failed, failovers, failed attempts by class (0 where a class
// had none), latency p50/p99 (null without requests) and tokens.
func TestAdminOpsSeries(t *testing.T) {
	e := newAdminEnv(t, 1)
	now := time.Now().UTC()
	at := now.Truncate(time.Minute).Add(-10 * time.Minute) // the start of a bucket ten minutes ago
	var recs []storage.UsageRecord
	for i := range 4 {
		r := storage.UsageRecord{RequestID: fmt.Sprintf("s-%d", i), At: at.Add(time.Duration(i) * time.Second), Model: "m", Route: "chat.completions",
			Status: 200, Attempts: 1, Latency: time.Duration(i+1) * 100 * time.Millisecond, InputTokens: 10, OutputTokens: 5}
		recs = append(recs, r)
	}
	recs[3].Status, recs[3].ErrorClass, recs[3].Attempts = 429, "rate", 3
	if err := e.store.InsertUsage(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	evs := []storage.ErrorEvent{{RequestID: "s-3", Attempt: 1, At: at.Add(3 * time.Second), Class: "rate", Status: 429},
		{RequestID: "s-3", Attempt: 2, At: at.Add(4 * time.Second), Class: "transient", Status: 502}}
	if err := e.store.InsertErrorEvents(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	c := e.withKey(e.adminKey)
	r := c.do("GET", "/api/admin/ops/series?window=1h", nil).want(t, 200)
	if r.json["window"] != "1h" || r.json["step_seconds"] != 60.0 {
		t.Fatalf("answer: %s", r.body)
	}
	points := r.json["points"].([]any)
	if len(points) != 60 {
		t.Fatalf("%d points, want 60", len(points))
	}
	if cl := fmt.Sprint(r.json["error_classes"]); cl != "[rate transient]" {
		t.Errorf("error_classes %s", cl)
	}
	var hit, empty map[string]any
	for _, p := range points {
		p := p.(map[string]any)
		if p["t"] == at.Format(time.RFC3339) {
			hit = p
		} else if p["requests"] == 0.0 && empty == nil {
			empty = p
		}
	}
	if hit == nil {
		t.Fatalf("no point at %s: %s", at.Format(time.RFC3339), r.body)
	}
	if hit["requests"] != 4.0 || hit["failed"] != 1.0 || hit["failovers"] != 2.0 || hit["input_tokens"] != 40.0 || hit["output_tokens"] != 20.0 {
		t.Errorf("the bucket: %v", hit)
	}
	if errs := hit["errors"].(map[string]any); errs["rate"] != 1.0 || errs["transient"] != 1.0 {
		t.Errorf("errors %v", errs)
	}
	// 100, 200, 300 and 400 ms: the median within a bin (25 %) of 200 ms,
	// p99 of 400 ms.
	if p50, p99 := hit["latency_p50_ms"].(float64), hit["latency_p99_ms"].(float64); p50 < 150 || p50 > 250 || p99 < 300 || p99 > 500 {
		t.Errorf("latency p50 %v p99 %v", p50, p99)
	}
	if empty == nil || empty["latency_p50_ms"] != nil || empty["errors"].(map[string]any)["rate"] != 0.0 {
		t.Errorf("an empty bucket: %v", empty)
	}
	for _, w := range []string{"6h", "24h", "7d"} {
		c.do("GET", "/api/admin/ops/series?window="+w, nil).want(t, 200)
	}
	// A window without failures lists no class: [], not null.
	e2 := newAdminEnv(t, 1)
	if r := e2.withKey(e2.adminKey).do("GET", "/api/admin/ops/series", nil).want(t, 200); !strings.Contains(string(r.body), `"error_classes":[]`) {
		t.Errorf("no failures: %s", r.body[:min(len(r.body), 200)])
	}
	if r := c.do("GET", "/api/admin/ops/series?window=2h", nil).want(t, 400); r.errCode() != "invalid_type" || !strings.Contains(string(r.body), "1h, 6h, 24h or 7d") {
		t.Errorf("bad window: %s", r.body)
	}
	c.do("GET", "/api/admin/ops/nope", nil).want(t, 404)
	c.do("POST", "/api/admin/ops/series", nil).want(t, 405)
}
