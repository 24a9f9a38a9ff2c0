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

// The 2026 headers: the active limit, per-model limit families
// (x-codex-<family>-*, fixture response-headers.extra-limit-family.http),
// credits and x-codex-limit-reached, as a boolean or naming a limit.
func TestParseRateLimitHeadersFamilies(t *testing.T) {
	now := time.Unix(1790000000, 0)
	_, h, _ := parseHTTPHead(t, testdata(t, "codex/response-headers.extra-limit-family.http"))
	l, ok := ParseRateLimitHeaders(h, now)
	if !ok || l.ActiveLimit != "premium" || len(l.Families) != 1 || l.Credits == nil || l.Credits.HasCredits || l.LimitReached {
		t.Fatalf("fixture: %+v", l)
	}
	f := l.Families[0]
	if f.ID != "bengalfox" || f.LimitName != "gpt-5.2-codex-sonic" || len(f.Windows) != 1 || f.Windows[0].Name != "7d" || f.Exhausted() {
		t.Fatalf("fixture family: %+v", f)
	}
	_, h, _ = parseHTTPHead(t, testdata(t, "codex/response-headers.200.http"))
	if l, _ := ParseRateLimitHeaders(h, now); len(l.Families) != 0 || l.ActiveLimit != "codex" || l.Credits == nil || l.Credits.Balance != "0" {
		t.Fatalf("200 fixture: the over-secondary and credits headers are no family: %+v", l)
	}

	h = http.Header{}
	for k, v := range map[string]string{
		"x-codex-gpt-5-mini-primary-used-percent": "100", "x-codex-gpt-5-mini-primary-window-minutes": "300",
		"x-codex-gpt-5-mini-primary-reset-after-seconds": "600", "x-codex-gpt-5-mini-primary-over-secondary-limit-percent": "0",
		"x-codex-gpt-5-mini-limit-reached": "True", "x-codex-credits-unlimited": "1", "x-codex-credits-balance": "5.39",
		"x-codex-limit-reached": "codex_bengalfox", "x-codex-promo-message": "hi", "x-codex-turn-state": "t",
	} {
		h.Set(k, v)
	}
	l, ok = ParseRateLimitHeaders(h, now)
	if !ok || len(l.Families) != 1 || !l.LimitReached || l.LimitReachedFamily != "bengalfox" || l.Credits == nil || !l.Credits.Unlimited || l.Credits.Balance != "5.39" {
		t.Fatalf("synthetic: %+v", l)
	}
	if f := l.Families[0]; f.ID != "gpt-5-mini" || !f.LimitReached || !f.Exhausted() || len(f.Windows) != 1 || !f.Windows[0].ResetsAt.Equal(now.Add(600*time.Second)) {
		t.Fatalf("synthetic family: %+v", f)
	}
	if l, _ := ParseRateLimitHeaders(http.Header{"X-Codex-Limit-Reached": {"true"}}, now); !l.LimitReached || l.LimitReachedFamily != "" {
		t.Fatalf("boolean limit reached: %+v", l)
	}
	ev := []byte(`{"type":"codex.rate_limits","plan_type":"plus","rate_limits":{"allowed":false,"limit_reached":true,"primary":null},"credits":{"has_credits":true,"unlimited":false,"balance":"123"}}`)
	if l, ok := ParseRateLimitsEvent(ev, now); !ok || !l.LimitReached || l.Credits == nil || l.Credits.Balance != "123" || !l.Credits.HasCredits {
		t.Fatalf("event: %+v", l)
	}
}
