package gateway

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// codexView is a codex account with a 5-hour and a 7-day window used
// p5 and p7 percent, resetting r5 and r7 after now.
func codexView(name string, st actors.Status, p5, p7 float64, r5, r7 time.Duration, now time.Time) actors.View {
	return actors.View{
		Name: name, Provider: storage.ProviderCodex, Status: st, MaxInFlight: 1, Plan: "pro",
		Windows: []actors.UsageWindow{
			{Name: "5h", UsedPercent: p5, WindowMinutes: 300, ResetsAt: now.Add(r5)},
			{Name: "7d", UsedPercent: p7, WindowMinutes: 10080, ResetsAt: now.Add(r7)},
		},
	}
}

// The pool's usage is the share of its capacity used, across the codex
// accounts the key may use that still serve; the reset is when capacity
// returns; limit_reached when none can serve.
func TestPoolCodexUsage(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	h, d := time.Hour, 24*time.Hour
	openai := actors.View{Name: "o", Provider: storage.ProviderOpenAI, Status: actors.StatusActive, MaxInFlight: 1}
	banned := codexView("b", actors.StatusBanned, 100, 100, h, d, now)
	other := codexView("g", actors.StatusActive, 0, 0, h, d, now)
	other.Group = "team-b"
	anyKey := &storage.APIKey{}
	for _, tc := range []struct {
		name  string
		views []actors.View
		key   *storage.APIKey
		want  string
	}{
		{"half used", []actors.View{
			codexView("a", actors.StatusActive, 20, 10, 2*h, 3*d, now),
			codexView("c", actors.StatusActive, 80, 31, 1*h, 5*d, now),
			openai, banned,
		}, anyKey, `{"plan_type":"pro","rate_limit":{"allowed":true,"limit_reached":false,` +
			`"primary_window":{"used_percent":50,"limit_window_seconds":18000,"reset_after_seconds":3600,"reset_at":1800003600},` +
			`"secondary_window":{"used_percent":21,"limit_window_seconds":604800,"reset_after_seconds":259200,"reset_at":1800259200}}}`},
		{"one used up: the other serves, the reset is the used one's", []actors.View{
			codexView("a", actors.StatusCooling, 100, 40, 30*time.Minute, d, now),
			codexView("c", actors.StatusActive, 0, 0, 4*h, 2*d, now),
		}, anyKey, `{"plan_type":"pro","rate_limit":{"allowed":true,"limit_reached":false,` +
			`"primary_window":{"used_percent":50,"limit_window_seconds":18000,"reset_after_seconds":1800,"reset_at":1800001800},` +
			`"secondary_window":{"used_percent":20,"limit_window_seconds":604800,"reset_after_seconds":86400,"reset_at":1800086400}}}`},
		{"all used up: the soonest reset", []actors.View{
			codexView("a", actors.StatusCooling, 100, 50, 3*h, d, now),
			codexView("c", actors.StatusCooling, 100, 60, 2*h, 2*d, now),
			other, // another group's account does not count for a team-a key
		}, &storage.APIKey{Group: "team-a"}, `{"plan_type":"pro","rate_limit":{"allowed":false,"limit_reached":true,` +
			`"primary_window":{"used_percent":100,"limit_window_seconds":18000,"reset_after_seconds":7200,"reset_at":1800007200},` +
			`"secondary_window":{"used_percent":55,"limit_window_seconds":604800,"reset_after_seconds":86400,"reset_at":1800086400}}}`},
		{"no codex account", []actors.View{openai, banned}, anyKey,
			`{"plan_type":"guest","rate_limit":{"allowed":false,"limit_reached":true,"primary_window":null,"secondary_window":null}}`},
	} {
		if tc.key.Group == "team-a" {
			for i := range tc.views[:2] {
				tc.views[i].Group = "team-a"
			}
		}
		b, _ := json.Marshal(poolCodexUsage(tc.views, tc.key, now))
		if string(b) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, b, tc.want)
		}
	}
}

// A key limited to models no account serves sees no account; a window
// that reset since its report counts as unused; credits are merged.
func TestPoolCodexUsageScopeAndCredits(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	a := codexView("a", actors.StatusActive, 90, 10, -time.Minute, time.Hour, now) // 5h reset a minute ago
	a.Models = []string{"gpt-5.4"}
	a.Credits = &upstream.Credits{HasCredits: true, Balance: "5.39"}
	c := codexView("c", actors.StatusActive, 30, 10, time.Hour, time.Hour, now)
	c.Plan = "plus"
	c.Credits = &upstream.Credits{Balance: "10"}
	u := poolCodexUsage([]actors.View{a, c}, &storage.APIKey{}, now)
	if p := u.RateLimit.PrimaryWindow; p.UsedPercent != 15 || p.ResetAt != now.Add(time.Hour).Unix() {
		t.Errorf("primary %+v", p)
	}
	if u.Credits == nil || !u.Credits.HasCredits || u.Credits.Unlimited || u.Credits.Balance != "15.39" {
		t.Errorf("credits %+v", u.Credits)
	}
	if u.PlanType != "plus" { // one each: the first by name
		t.Errorf("plan %q", u.PlanType)
	}
	u = poolCodexUsage([]actors.View{a}, &storage.APIKey{Models: []string{"gpt-5.5"}}, now)
	if !u.RateLimit.LimitReached || u.RateLimit.PrimaryWindow != nil || u.Credits != nil {
		t.Errorf("out-of-scope account counted: %+v %+v", u.RateLimit, u.Credits)
	}
}
