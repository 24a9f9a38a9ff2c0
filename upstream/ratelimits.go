package upstream

import (
	"net/http"
	"net/textproto"
	"slices"
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

// RateLimits are the usage limits one Codex answer reported: its x-codex-*
// response headers or a codex.rate_limits event (codex-rs/codex-api/src/rate_limits.rs;
// fixtures codex-backend/response-headers.200.http and
// response-headers.extra-limit-family.http).
type RateLimits struct {
	Plan string // x-codex-plan-type / plan_type; "" when absent
	// Windows are the account's own ("codex") limit, x-codex-primary-* and
	// x-codex-secondary-*, primary first; a window the backend reports as
	// empty (0 minutes and 0 % used) is left out.
	Windows []RateWindow
	// ActiveLimit is x-codex-active-limit: the limit the backend applied to
	// this request ("codex" for the account's own, else a family's ID,
	// e.g. "premium"); "" when absent.
	ActiveLimit string
	// Families are the per-model limits, x-codex-<family>-*: each its own
	// windows, in the order of their IDs.
	Families []LimitFamily
	// Credits are x-codex-credits-* (or the event's credits); nil when absent.
	Credits *Credits
	// LimitReached is x-codex-limit-reached (the event's
	// rate_limits.limit_reached): the backend says the limit that applies
	// (ActiveLimit, else the account's own) is used up. LimitReachedFamily,
	// when the header names a limit instead of a boolean, is that limit.
	LimitReached       bool
	LimitReachedFamily string
}

// LimitFamily is one per-model usage limit of a Codex account
// (x-codex-<id>-primary-*, -secondary-*, -limit-name).
type LimitFamily struct {
	// ID is the header's family part in lower case ("bengalfox"); the
	// Codex CLI names the limit "codex_" + ID with '-' as '_'.
	ID string
	// LimitName is x-codex-<id>-limit-name: the model the limit covers
	// (e.g. "gpt-5.2-codex-sonic"); "" when not given.
	LimitName string
	Windows   []RateWindow // as RateLimits.Windows
	// LimitReached is x-codex-<id>-limit-reached.
	LimitReached bool
}

// Exhausted reports whether the family's limit is used up: the backend
// said so, or one of its windows is at 100 %.
func (f *LimitFamily) Exhausted() bool {
	if f.LimitReached {
		return true
	}
	for _, w := range f.Windows {
		if w.Exhausted() {
			return true
		}
	}
	return false
}

// Credits are a Codex account's purchased credits (x-codex-credits-has-credits,
// -unlimited, -balance).
type Credits struct {
	HasCredits bool
	Unlimited  bool
	Balance    string // as the backend wrote it ("0", "123", "5.39"); "" when absent
}

// Canonical names of the Codex rate-limit headers
// (codex-rs/codex-api/src/rate_limits.rs; fixture response-headers.200.http).
const (
	hPlanType     = "X-Codex-Plan-Type"
	hActiveLimit  = "X-Codex-Active-Limit"
	hLimitReached = "X-Codex-Limit-Reached"
	hHasCredits   = "X-Codex-Credits-Has-Credits"
	hUnlimited    = "X-Codex-Credits-Unlimited"
	hBalance      = "X-Codex-Credits-Balance"
	codexPrefix   = "X-Codex-"
)

// windowHeaders are the header names of one limit's two windows under a
// prefix ("X-Codex-" for the account's own, "X-Codex-<Family>-" for a family).
type windowHeaders [2]struct{ used, minutes, resetAt, resetAfter, name string }

func windowHeadersOf(prefix string) windowHeaders {
	var wh windowHeaders
	for i, w := range [2]string{"Primary", "Secondary"} {
		p := prefix + w + "-"
		wh[i].used, wh[i].minutes, wh[i].resetAt, wh[i].resetAfter = p+"Used-Percent", p+"Window-Minutes", p+"Reset-At", p+"Reset-After-Seconds"
		wh[i].name = strings.ToLower(w)
	}
	return wh
}

var codexWindowHeaders = windowHeadersOf(codexPrefix)

// ParseRateLimitHeaders reads the x-codex-* rate-limit headers of h (keys in
// canonical form, as net/http stores them). now is when the answer arrived:
// x-codex-*-reset-after-seconds counts from it and wins over
// x-codex-*-reset-at (unix seconds) when both are given. ok is false when h
// carries no x-codex-* limit header (a window's used percent, the active
// limit, credits, a limit reached). Malformed values are skipped.
func ParseRateLimitHeaders(h http.Header, now time.Time) (l RateLimits, ok bool) {
	l.Windows, ok = parseWindows(h, &codexWindowHeaders, now, l.Windows)
	if v := h[hPlanType]; len(v) > 0 {
		l.Plan = strings.ToLower(strings.TrimSpace(v[0]))
	}
	if v := h[hActiveLimit]; len(v) > 0 && strings.TrimSpace(v[0]) != "" {
		l.ActiveLimit, ok = strings.ToLower(strings.TrimSpace(v[0])), true
	}
	if v := h[hLimitReached]; len(v) > 0 && strings.TrimSpace(v[0]) != "" {
		ok = true
		if b, isBool := headerBool(v[0]); isBool {
			l.LimitReached = b
		} else {
			l.LimitReached, l.LimitReachedFamily = true, familyOfLimit(v[0])
		}
	}
	if hc, okHC := h[hHasCredits]; okHC || len(h[hBalance]) > 0 || len(h[hUnlimited]) > 0 {
		c := &Credits{}
		if len(hc) > 0 {
			c.HasCredits, _ = headerBool(hc[0])
		}
		if v := h[hUnlimited]; len(v) > 0 {
			c.Unlimited, _ = headerBool(v[0])
		}
		if v := h[hBalance]; len(v) > 0 {
			c.Balance = strings.TrimSpace(v[0])
		}
		l.Credits, ok = c, true
	}
	for k := range h {
		id, ok := familyKey(k)
		if !ok || slices.ContainsFunc(l.Families, func(f LimitFamily) bool { return f.ID == id }) {
			continue
		}
		l.Families = append(l.Families, LimitFamily{ID: id})
	}
	if len(l.Families) > 0 {
		ok = true
		slices.SortFunc(l.Families, func(a, b LimitFamily) int { return strings.Compare(a.ID, b.ID) })
		for i := range l.Families {
			f := &l.Families[i]
			prefix := codexPrefix + textproto.CanonicalMIMEHeaderKey(f.ID) + "-"
			wh := windowHeadersOf(prefix)
			f.Windows, _ = parseWindows(h, &wh, now, nil)
			if v := h[prefix+"Limit-Name"]; len(v) > 0 {
				f.LimitName = strings.TrimSpace(v[0])
			}
			if v := h[prefix+"Limit-Reached"]; len(v) > 0 {
				f.LimitReached, _ = headerBool(v[0])
			}
		}
	}
	return l, ok
}

// familyKey returns the family ID of a per-model limit header
// (X-Codex-<Family>-Primary-…, -Secondary-…, -Limit-Name, -Limit-Reached),
// lower case; ok is false for any other header, the account's own limit's
// included.
func familyKey(k string) (id string, ok bool) {
	rest, found := strings.CutPrefix(k, codexPrefix)
	if !found {
		return "", false
	}
	for _, sep := range [...]string{"-Primary-", "-Secondary-", "-Limit-Name", "-Limit-Reached"} {
		if i := strings.LastIndex(rest, sep); i > 0 {
			if sep[1] == 'L' && i+len(sep) != len(rest) {
				continue // -Limit-Name and -Limit-Reached end the key
			}
			id = strings.ToLower(rest[:i])
			switch id {
			case "primary", "secondary", "primary-over", "credits":
				return "", false
			}
			return id, true
		}
	}
	return "", false
}

// familyOfLimit maps a limit id as the Codex CLI names it ("codex_bengalfox",
// or "codex" for the account's own) to a family ID ("bengalfox"; "" for the
// account's own).
func familyOfLimit(v string) string {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "codex" {
		return ""
	}
	v = strings.TrimPrefix(v, "codex_")
	return strings.ReplaceAll(v, "_", "-")
}

// parseWindows appends the windows of wh found in h to dst; found reports
// whether any used-percent header was there.
func parseWindows(h http.Header, wh *windowHeaders, now time.Time, dst []RateWindow) (_ []RateWindow, found bool) {
	for _, w := range wh {
		used, okUsed := headerFloat(h, w.used)
		if !okUsed {
			continue
		}
		found = true
		mins, _ := headerFloat(h, w.minutes)
		rw := RateWindow{UsedPercent: used, WindowMinutes: int(mins)}
		if after, okA := headerFloat(h, w.resetAfter); okA && after > 0 {
			rw.ResetsAt = now.Add(time.Duration(after * float64(time.Second))).Truncate(time.Second)
		} else if at, okAt := headerFloat(h, w.resetAt); okAt && at > 0 {
			rw.ResetsAt = time.Unix(int64(at), 0)
		}
		if rw.WindowMinutes == 0 && rw.UsedPercent == 0 {
			continue // the backend's way of saying "no such window"
		}
		rw.Name = windowName(rw.WindowMinutes, w.name)
		dst = append(dst, rw)
	}
	return dst, found
}

// headerBool reads the Codex backend's booleans: True/False, true/false, 1/0.
func headerBool(v string) (b, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "1":
		return true, true
	case "false", "0":
		return false, true
	}
	return false, false
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
	l.LimitReached = rl.Get("limit_reached").Type == gjson.True
	if c := r.Get("credits"); c.IsObject() {
		l.Credits = &Credits{HasCredits: c.Get("has_credits").Type == gjson.True, Unlimited: c.Get("unlimited").Type == gjson.True, Balance: c.Get("balance").String()}
	}
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
