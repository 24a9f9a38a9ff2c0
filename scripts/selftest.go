package scripts

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SelfTest runs p over synthetic accounts (SampleViews: fresh, cooling,
// 401-, 429-, timeout- and 5xx-failed, slow, flaky, exhausted usage windows,
// zero and extreme values, …), synthetic requests (SampleRequests) and the
// given sample of the live pool, and fails on the first error: a runtime
// error, a call over its budget (a call stopped by a wall-clock timeout is
// retried once, as a loaded machine may have descheduled it), a result of the wrong type (score a number,
// nil or false; tier healthy, warm, risky or nil; recheck_after a
// non-negative number or nil; route a table of known fields or nil), or the
// whole run exceeding Options.SelfTestBudget. It also fails when the sample
// has active accounts and score excludes every one of them.
//
// SelfTest runs p's own Lua state, so it must not run while another goroutine
// uses p. Errors wrap an *Error (errors.As) that carries the line.
func SelfTest(p *Policy, sample []AccountView) error {
	start := time.Now()
	deadline := start.Add(p.opts.SelfTestBudget)
	now := start
	over := func(done, total int) error {
		if time.Now().Before(deadline) {
			return nil
		}
		return fmt.Errorf("self-test: %w", &Error{Policy: p.name, Kind: ErrBudget,
			Msg: fmt.Sprintf("self-test ran over its %v budget after %d of %d calls", p.opts.SelfTestBudget, done, total)})
	}
	// A call the wall-clock backstop stopped may have been descheduled on a
	// loaded machine: it gets a second chance. Instruction budgets are
	// deterministic, so a retry changes nothing for them.
	score := func(a *AccountView) (bool, error) {
		_, ok, _, _, err := p.Score(a, now)
		if errors.Is(err, ErrBudget) {
			_, ok, _, _, err = p.Score(a, now)
		}
		return ok, err
	}
	views, reqs := SampleViews(now), SampleRequests()
	total := len(views) + len(reqs) + len(sample)
	done := 0
	for i := range views {
		if _, err := score(&views[i]); err != nil {
			return fmt.Errorf("self-test, synthetic account %q: %w", views[i].Name, err)
		}
		done++
		if err := over(done, total); err != nil {
			return err
		}
	}
	for i := range reqs {
		_, err := p.Route(&reqs[i])
		if errors.Is(err, ErrBudget) {
			_, err = p.Route(&reqs[i])
		}
		if err != nil {
			return fmt.Errorf("self-test, synthetic request %d: %w", i+1, err)
		}
		done++
		if err := over(done, total); err != nil {
			return err
		}
	}
	active, accepted := 0, 0
	for i := range sample {
		ok, err := score(&sample[i])
		if err != nil {
			return fmt.Errorf("self-test, pool account %q: %w", sample[i].Name, err)
		}
		if sample[i].Status == "active" {
			active++
			if ok {
				accepted++
			}
		}
		done++
		if err := over(done, total); err != nil {
			return err
		}
	}
	if active > 0 && accepted == 0 {
		return fmt.Errorf("self-test: %w", &Error{Policy: p.name, Line: definedAt(p.score), Kind: ErrResult,
			Msg: fmt.Sprintf("score excluded all %d active accounts of the pool sample", active)})
	}
	return nil
}

// SampleViews returns the synthetic accounts SelfTest scores, relative to
// now; each one's Name says what it represents. `troupe policy check` may
// use them as a sample pool.
func SampleViews(now time.Time) []AccountView {
	s := &sampler{now: now}
	s.statuses()
	s.failures()
	s.usage()
	s.edges()
	return append(s.out, AccountView{Name: "zero"})
}

// sampler builds SampleViews: healthy accounts edited into what each
// sample stands for.
type sampler struct {
	now time.Time
	out []AccountView
}

// The usage windows of a Codex plan.
var (
	aWeek     = UsageWindow{Name: "7d", WindowMinutes: 7 * 24 * 60}
	fiveHours = UsageWindow{Name: "5h", WindowMinutes: 300}
)

func (s *sampler) ago(d time.Duration) time.Time { return s.now.Add(-d) }

// add appends a healthy, used account named name, edited by edit.
func (s *sampler) add(name string, edit func(a *AccountView)) {
	a := AccountView{
		ID: "synthetic-" + name, Name: name, Provider: "codex", Plan: "plus", Group: "",
		Status: "active", MaxInFlight: 4, EWMASuccess: 1,
		Requests: 120, Successes: 118, Failures: 2, SuccessStreak: 7,
		EWMALatency: 1800 * time.Millisecond, EWMATTFT: 600 * time.Millisecond,
	}
	edit(&a)
	s.out = append(s.out, a)
}

// statuses: new, busy, cooling and cooled, and every status an account
// leaves the pool with.
func (s *sampler) statuses() {
	s.add("fresh", func(a *AccountView) {
		a.Requests, a.Successes, a.Failures, a.SuccessStreak = 0, 0, 0, 0
		a.EWMALatency, a.EWMATTFT = 0, 0
	})
	s.add("busy", func(a *AccountView) { a.InFlight = a.MaxInFlight })
	s.add("cooling", func(a *AccountView) {
		a.Status, a.CooldownUntil, a.CooldownReason = "cooling", s.now.Add(10*time.Minute), "rate"
		a.LastFailure.Rate, a.FailureStreak, a.SuccessStreak = s.ago(5*time.Second), 1, 0
	})
	s.add("cooled", func(a *AccountView) {
		a.Status, a.CooldownUntil, a.CooldownReason = "cooling", s.ago(time.Second), "transient"
		a.LastFailure.Transient = s.ago(31 * time.Second)
	})
	s.add("401-failed", func(a *AccountView) {
		a.LastFailure.Auth, a.FailureStreak, a.SuccessStreak = s.ago(time.Minute), 1, 0
	})
	s.add("unauthorized", func(a *AccountView) {
		a.Status, a.LastFailure.Auth, a.FailureStreak, a.SuccessStreak = "unauthorized", s.ago(time.Minute), 2, 0
	})
	s.add("banned", func(a *AccountView) { a.Status, a.LastFailure.Banned = "banned", s.ago(time.Hour) })
	s.add("disabled", func(a *AccountView) { a.Status = "disabled" })
}

// failures: recent failures of each class, a flaky and a slow account.
func (s *sampler) failures() {
	s.add("429-quota", func(a *AccountView) {
		a.LastFailure.Quota, a.FailureStreak, a.SuccessStreak = s.ago(2*time.Minute), 1, 0
		w := fiveHours
		w.UsedPercent, w.ResetsAt = 100, s.now.Add(2*time.Hour)
		a.Windows = []UsageWindow{w}
	})
	s.add("429-rate", func(a *AccountView) {
		a.LastFailure.Rate, a.FailureStreak, a.SuccessStreak = s.ago(30*time.Second), 2, 0
	})
	s.add("timeout", func(a *AccountView) {
		a.LastFailure.Timeout, a.FailureStreak, a.SuccessStreak = s.ago(time.Minute), 1, 0
	})
	s.add("5xx", func(a *AccountView) {
		a.LastFailure.Transient, a.FailureStreak, a.SuccessStreak, a.EWMASuccess = s.ago(10*time.Second), 3, 0, 0.6
	})
	s.add("flaky", func(a *AccountView) {
		a.EWMASuccess, a.FailureStreak, a.SuccessStreak, a.Failures = 0.3, 8, 0, 100
		a.LastFailure.Transient, a.LastFailure.Rate = s.ago(3*time.Minute), s.ago(20*time.Minute)
	})
	s.add("slow", func(a *AccountView) { a.EWMALatency, a.EWMATTFT = 25*time.Second, 8*time.Second })
}

// usage: plan usage windows filling up, used up, and past their reset.
func (s *sampler) usage() {
	s.add("usage-75", func(a *AccountView) {
		w := aWeek
		w.UsedPercent, w.ResetsAt = 75, s.now.Add(50*time.Hour)
		a.Windows = []UsageWindow{w}
	})
	s.add("usage-exhausted", func(a *AccountView) {
		w5, w7 := fiveHours, aWeek
		w5.UsedPercent, w5.ResetsAt = 100, s.now.Add(time.Hour)
		w7.UsedPercent, w7.ResetsAt = 104, s.now.Add(72*time.Hour)
		a.Windows = []UsageWindow{w5, w7}
	})
	s.add("usage-reset-passed", func(a *AccountView) {
		w := aWeek
		w.UsedPercent, w.ResetsAt = 100, s.ago(time.Minute)
		a.Windows = []UsageWindow{w}
	})
}

// edges: long streaks, a skewed clock, old failures, tags, and values at
// their extremes.
func (s *sampler) edges() {
	s.add("streak", func(a *AccountView) {
		a.SuccessStreak, a.Requests, a.Successes = 500, 1_000_000, 999_000
	})
	s.add("skewed-clock", func(a *AccountView) {
		a.LastFailure.Transient, a.LastFailure.Auth = s.now.Add(time.Hour), s.now.Add(time.Minute)
		a.CooldownUntil = s.now.Add(-48 * time.Hour)
	})
	s.add("old-failures", func(a *AccountView) {
		old := s.ago(30 * 24 * time.Hour)
		a.LastFailure = FailureTimes{Quota: old, Rate: old, Auth: old, Banned: old, Transient: old, Timeout: old}
	})
	s.add("weighted", func(a *AccountView) {
		a.Tags, a.Priority = []string{"weight:5", "region:eu"}, 3
	})
	s.add("extreme", func(a *AccountView) {
		a.Name = strings.Repeat("n", 1024)
		a.Priority, a.MaxInFlight, a.InFlight = -5, 1_000_000, 999_999
		a.Requests, a.Successes, a.Failures = 1<<62, 1<<61, 1<<61
		a.SuccessStreak, a.FailureStreak = 1<<30, 0
		for i := range 64 {
			a.Tags = append(a.Tags, "tag:"+strconv.Itoa(i))
		}
		for i := range 8 {
			a.Windows = append(a.Windows, UsageWindow{Name: "w" + strconv.Itoa(i), UsedPercent: float64(i) * 20, WindowMinutes: (i + 1) * 60, ResetsAt: s.now.Add(time.Duration(i) * time.Hour)})
		}
	})
}

// sampleWhat says what each sample of SampleViews stands for, by the name
// it was added with (its ID less "synthetic-"; "" for the zero view).
var sampleWhat = map[string]string{
	"fresh":              "new: no requests yet",
	"busy":               "every slot in flight (4 of 4)",
	"cooling":            "cooling down 10 more minutes after a 429 rate limit",
	"cooled":             "its cooldown ended a second ago (a 5xx 31 s ago)",
	"401-failed":         "a 401 a minute ago, still in the pool",
	"unauthorized":       "credentials refused for good: out of the pool",
	"banned":             "banned by the upstream: out of the pool",
	"disabled":           "disabled by the operator: out of the pool",
	"429-quota":          "a quota 429 2 min ago; its 5h window used up, resets in 2 h",
	"429-rate":           "two rate-limit 429s in a row, the last 30 s ago",
	"timeout":            "a timeout a minute ago",
	"5xx":                "three 5xx in a row, the last 10 s ago; success rate 60 %",
	"flaky":              "eight failures in a row; success rate 30 %",
	"slow":               "healthy but slow: 25 s a request, 8 s to the first token",
	"usage-75":           "75 % of its weekly window used, resets in 50 h",
	"usage-exhausted":    "5h window used up and weekly one over 100 %",
	"usage-reset-passed": "weekly window used up, but its reset passed a minute ago",
	"streak":             "500 successes in a row, a million requests",
	"skewed-clock":       "failure times in the future (a host clock skewed)",
	"old-failures":       "one failure of every class, 30 days ago",
	"weighted":           "tags weight:5 and region:eu, priority 3",
	"extreme":            "every field at an extreme: a 1,024-byte name, 64 tags, 8 windows",
	"":                   "the zero view: every field empty",
}

// SampleDescription says, in a few words, what sample view v of
// SampleViews stands for; "" for a view that is not one of them.
func SampleDescription(v AccountView) string {
	if v.ID == "" && v.Name == "zero" {
		return sampleWhat[""]
	}
	name, ok := strings.CutPrefix(v.ID, "synthetic-")
	if !ok {
		return ""
	}
	return sampleWhat[name]
}

// SampleRequests returns the synthetic requests SelfTest routes.
func SampleRequests() []RequestView {
	return []RequestView{
		{},
		{Model: "gpt-5", Protocol: "chat.completions", Stream: true,
			APIKey: APIKeyView{ID: "key-1", Name: "ci", Group: ""}, ClientIP: "203.0.113.7"},
		{Model: "gpt-5-codex", Protocol: "responses", SessionKey: "sess-" + strings.Repeat("x", 200),
			APIKey: APIKeyView{ID: "key-2", Name: "team", Group: "team"}, ClientIP: "2001:db8::1"},
		{Model: "claude-sonnet-4-5", Protocol: "messages", Stream: true,
			APIKey: APIKeyView{ID: "key-3", Name: "anthropic-users", Group: "anthropic"}},
	}
}
