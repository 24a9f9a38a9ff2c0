package actors

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// TestViewFailureTimes: a View's failure times sit behind a pointer that a
// failure replaces, never writes (a published View's are shared), and its
// JSON (the fleet's view exchange) keeps the LastFailure and LastTimeout
// fields, both ways.
func TestViewFailureTimes(t *testing.T) {
	var v View
	if !v.FailedAt(upstream.ClassRate).IsZero() || !v.TimedOutAt().IsZero() || !v.FailedAt(upstream.Class(99)).IsZero() {
		t.Fatalf("a view without failures: %v %v", v.FailedAt(upstream.ClassRate), v.TimedOutAt())
	}
	at := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	v.LastFailures = withFailure(v.LastFailures, upstream.ClassRate, at, false)
	published := v.LastFailures
	v.LastFailures = withFailure(v.LastFailures, upstream.ClassTransient, at.Add(time.Second), true)
	if !published.LastFailure[upstream.ClassTransient].IsZero() || !published.LastTimeout.IsZero() {
		t.Fatalf("a failure wrote the published times: %+v", published)
	}
	if v.FailedAt(upstream.ClassRate) != at || v.FailedAt(upstream.ClassTransient) != at.Add(time.Second) || v.TimedOutAt() != at.Add(time.Second) {
		t.Fatalf("failure times: %+v", v.LastFailures)
	}

	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var back View
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.FailedAt(upstream.ClassRate) != at || back.TimedOutAt() != at.Add(time.Second) {
		t.Fatalf("round trip: %s", b)
	}
	// The form a View had before (the fields in the View itself) decodes.
	old := `{"ID":"a","LastFailure":["0001-01-01T00:00:00Z","0001-01-01T00:00:00Z","0001-01-01T00:00:00Z","2026-12-06T20:00:00Z"],"LastTimeout":"2026-12-06T20:00:01Z"}`
	var fromOld View
	if err := json.Unmarshal([]byte(old), &fromOld); err != nil {
		t.Fatal(err)
	}
	if fromOld.FailedAt(upstream.Class(3)) != at || fromOld.TimedOutAt() != at.Add(time.Second) {
		t.Fatalf("the old form: %+v", fromOld.LastFailures)
	}
	// No failures: no fields, and nothing allocated on decoding.
	b, _ = json.Marshal(View{ID: "b"})
	var none View
	if err := json.Unmarshal(b, &none); err != nil || none.LastFailures != nil {
		t.Fatalf("a view without failures: %s -> %+v, %v", b, none.LastFailures, err)
	}
}
