package upstream

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// RateWindow is one Codex usage window as the backend reported it.
type RateWindow struct {
	Name          string    // "5h", "7d", … from the window length ("primary"/"secondary" when the length is unknown)
	UsedPercent   float64   // 0–100; may exceed 100
	WindowMinutes int       // window length; 0 when unknown
	ResetsAt      time.Time // zero when unknown
}

// Exhausted reports whether the window is used up (100 % or more).
func (w RateWindow) Exhausted() bool { return w.UsedPercent >= 100 }

// RateLimits are the usage windows of one Codex answer: the x-codex-primary-*
// and x-codex-secondary-* response headers, or a codex.rate_limits event.
// Windows has the primary window first; a window the backend reports as
// empty (0 minutes and 0 % used) is left out.
type RateLimits struct {
	Plan    string // x-codex-plan-type / plan_type; "" when absent
	Windows []RateWindow
}

// Canonical names of the Codex rate-limit headers
// (codex-rs/codex-api/src/rate_limits.rs; fixture response-headers.200.http).
const (
	hPlanType = "X-Codex-Plan-Type"
)

var codexWindowHeaders = [2]struct {
	used, minutes, resetAt, resetAfter, name string
}{
	{"X-Codex-Primary-Used-Percent", "X-Codex-Primary-Window-Minutes", "X-Codex-Primary-Reset-At", "X-Codex-Primary-Reset-After-Seconds", "primary"},
	{"X-Codex-Secondary-Used-Percent", "X-Codex-Secondary-Window-Minutes", "X-Codex-Secondary-Reset-At", "X-Codex-Secondary-Reset-After-Seconds", "secondary"},
}

// ParseRateLimitHeaders reads the x-codex-* rate-limit headers of h (keys in
// canonical form, as net/http stores them). now is when the answer arrived:
// x-codex-*-reset-after-seconds counts from it and wins over
// x-codex-*-reset-at (unix seconds) when both are given. ok is false when h
// carries no x-codex-*-used-percent header. Malformed values are skipped.
func ParseRateLimitHeaders(h http.Header, now time.Time) (l RateLimits, ok bool) {
	for _, wh := range codexWindowHeaders {
		used, okUsed := headerFloat(h, wh.used)
		if !okUsed {
			continue
		}
		ok = true
		mins, _ := headerFloat(h, wh.minutes)
		w := RateWindow{UsedPercent: used, WindowMinutes: int(mins)}
		if after, okA := headerFloat(h, wh.resetAfter); okA && after > 0 {
			w.ResetsAt = now.Add(time.Duration(after * float64(time.Second))).Truncate(time.Second)
		} else if at, okAt := headerFloat(h, wh.resetAt); okAt && at > 0 {
			w.ResetsAt = time.Unix(int64(at), 0)
		}
		if w.WindowMinutes == 0 && w.UsedPercent == 0 {
			continue // the backend's way of saying "no such window"
		}
		w.Name = windowName(w.WindowMinutes, wh.name)
		l.Windows = append(l.Windows, w)
	}
	if v := h[hPlanType]; len(v) > 0 {
		l.Plan = strings.ToLower(strings.TrimSpace(v[0]))
	}
	return l, ok
}

// ParseRateLimitsEvent reads the data of a codex.rate_limits event (the
// fixture codex-rate-limits-event.json): rate_limits.primary and .secondary,
// each {used_percent, window_minutes, reset_at | reset_after_seconds | resets_in_seconds},
// and plan_type. ok is false when data is not such an event.
func ParseRateLimitsEvent(data []byte, now time.Time) (l RateLimits, ok bool) {
	if !gjson.ValidBytes(data) {
		return l, false
	}
	r := gjson.ParseBytes(data)
	if r.Get("type").String() != "codex.rate_limits" {
		return l, false
	}
	rl := r.Get("rate_limits")
	for _, name := range [...]string{"primary", "secondary"} {
		w := rl.Get(name)
		if !w.IsObject() {
			continue
		}
		rw := RateWindow{UsedPercent: w.Get("used_percent").Float(), WindowMinutes: int(w.Get("window_minutes").Int())}
		switch {
		case w.Get("reset_after_seconds").Float() > 0:
			rw.ResetsAt = now.Add(time.Duration(w.Get("reset_after_seconds").Float() * float64(time.Second))).Truncate(time.Second)
		case w.Get("resets_in_seconds").Float() > 0:
			rw.ResetsAt = now.Add(time.Duration(w.Get("resets_in_seconds").Float() * float64(time.Second))).Truncate(time.Second)
		case w.Get("reset_at").Int() > 0:
			rw.ResetsAt = time.Unix(w.Get("reset_at").Int(), 0)
		}
		if rw.WindowMinutes == 0 && rw.UsedPercent == 0 {
			continue
		}
		rw.Name = windowName(rw.WindowMinutes, name)
		l.Windows = append(l.Windows, rw)
	}
	l.Plan = strings.ToLower(r.Get("plan_type").String())
	return l, true
}

// windowName names a window by its length: "5h" for 300 minutes, "7d" for
// 10080, "90m" for 90; fallback when the length is unknown.
func windowName(minutes int, fallback string) string {
	switch {
	case minutes <= 0:
		return fallback
	case minutes%1440 == 0:
		return strconv.Itoa(minutes/1440) + "d"
	case minutes%60 == 0:
		return strconv.Itoa(minutes/60) + "h"
	}
	return strconv.Itoa(minutes) + "m"
}

func headerFloat(h http.Header, key string) (float64, bool) {
	v := h[key]
	if len(v) == 0 {
		return 0, false
	}
	s := strings.TrimSpace(v[0])
	if s == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != f || f < 0 || f > 1e12 {
		return 0, false
	}
	return f, true
}
