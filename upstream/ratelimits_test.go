package upstream

import (
	"net/http"
	"testing"
	"time"
)

func TestParseRateLimitHeadersFixtures(t *testing.T) {
	now := time.Unix(1790000000, 0)
	_, h, _ := parseHTTPHead(t, testdata(t, "codex/response-headers.200.http"))
	l, ok := ParseRateLimitHeaders(h, now)
	if !ok || l.Plan != "pro" || len(l.Windows) != 1 {
		t.Fatalf("200: ok %v, %+v", ok, l)
	}
	w := l.Windows[0]
	if w.Name != "7d" || w.UsedPercent != 22 || w.WindowMinutes != 10080 || !w.ResetsAt.Equal(now.Add(155800*time.Second)) {
		t.Fatalf("200 primary: %+v", w)
	}

	_, h, _ = parseHTTPHead(t, testdata(t, "codex/error-429-usage-limit.http"))
	l, ok = ParseRateLimitHeaders(h, now)
	if !ok || len(l.Windows) != 2 {
		t.Fatalf("429: %+v", l)
	}
	if !l.Windows[0].Exhausted() || l.Windows[1].Name != "5h" || l.Windows[1].UsedPercent != 87.5 || !l.Windows[1].ResetsAt.IsZero() {
		t.Fatalf("429 windows: %+v", l.Windows)
	}

	_, h, _ = parseHTTPHead(t, testdata(t, "codex/response-headers.extra-limit-family.http"))
	l, ok = ParseRateLimitHeaders(h, now)
	if !ok || l.Plan != "prolite" || len(l.Windows) != 1 || l.Windows[0].UsedPercent != 29 {
		t.Fatalf("extra family: %+v", l)
	}

	if _, ok := ParseRateLimitHeaders(http.Header{"Content-Type": {"text/event-stream"}}, now); ok {
		t.Fatal("no x-codex headers: ok")
	}
	bad := http.Header{"X-Codex-Primary-Used-Percent": {"NaN"}, "X-Codex-Secondary-Used-Percent": {"-3"}}
	if l, ok := ParseRateLimitHeaders(bad, now); ok || len(l.Windows) != 0 {
		t.Fatalf("malformed: %v %+v", ok, l)
	}
}

func TestParseRateLimitsEvent(t *testing.T) {
	now := time.Unix(1690000000, 0)
	l, ok := ParseRateLimitsEvent(testdata(t, "codex/codex-rate-limits-event.json"), now)
	if !ok || l.Plan != "plus" || len(l.Windows) != 1 {
		t.Fatalf("%v %+v", ok, l)
	}
	if w := l.Windows[0]; w.Name != "1h" || w.UsedPercent != 42 || !w.ResetsAt.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("%+v", w)
	}
	for _, bad := range []string{``, `{}`, `{"type":"response.created"}`, `[1]`, `{"type":"codex.rate_limits","rate_limits":7}`} {
		l, ok := ParseRateLimitsEvent([]byte(bad), now)
		if bad == `{"type":"codex.rate_limits","rate_limits":7}` {
			if !ok || len(l.Windows) != 0 {
				t.Fatalf("%s: %v %+v", bad, ok, l)
			}
			continue
		}
		if ok {
			t.Fatalf("%q: ok", bad)
		}
	}
}

func FuzzParseRateLimitsEvent(f *testing.F) {
	f.Add([]byte(`{"type":"codex.rate_limits","rate_limits":{"primary":{"used_percent":1,"window_minutes":300,"reset_after_seconds":5}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, _ := ParseRateLimitsEvent(b, time.Unix(0, 0))
		for _, w := range l.Windows {
			if w.Name == "" {
				t.Fatal("window without a name")
			}
		}
	})
}
