package scripts

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// pool is a tiny stand-in for the scheduler's index: it scores every account
// with Score, keeps those under their tier's concurrency cap, orders them by
// tier, score (its band: Knobs.Band) and the policy's tie-breaks, applies top-k jitter with
// PickRank, and honours stickiness keys from Route. The real index is the
// scheduler's; this one scans, which is fine for a handful of accounts.
type pool struct {
	t      *testing.T
	p      *Policy
	accts  []AccountView
	last   []int // grant sequence of each account's last lease; 0 = never
	seq    int
	now    time.Time
	rnd    *rand.Rand
	sticky map[string]int
	// noJitter turns top-k jitter off for tests of other behaviour.
	noJitter bool
}

func newPool(t *testing.T, p *Policy, accts ...AccountView) *pool {
	return &pool{t: t, p: p, accts: accts, last: make([]int, len(accts)), now: testNow,
		rnd: rand.New(rand.NewPCG(1, 2)), sticky: map[string]int{}}
}

type cand struct {
	i     int
	score float64
	tier  Tier
}

// candidates returns the pickable accounts, best first.
func (pl *pool) candidates() []cand {
	pl.t.Helper()
	var cs []cand
	k := pl.p.Knobs()
	for i := range pl.accts {
		a := &pl.accts[i]
		s, ok, tier, _, err := pl.p.Score(a, pl.now)
		if err != nil {
			pl.t.Fatalf("score(%s): %v", a.Name, err)
		}
		if ok && a.InFlight < k.Limit(tier, a.MaxInFlight) {
			cs = append(cs, cand{i, k.Band(s), tier})
		}
	}
	slices.SortStableFunc(cs, func(x, y cand) int {
		if c := cmp.Compare(x.tier, y.tier); c != 0 {
			return c
		}
		if c := cmp.Compare(y.score, x.score); c != 0 {
			return c
		}
		a, b := &pl.accts[x.i], &pl.accts[y.i]
		for _, tb := range k.TieBreak {
			var c int
			switch tb {
			case TieLeastRecent:
				c = cmp.Compare(pl.last[x.i], pl.last[y.i])
			case TieLeastInflight:
				c = cmp.Compare(float64(a.InFlight)/float64(a.MaxInFlight), float64(b.InFlight)/float64(b.MaxInFlight))
			case TiePriority:
				c = cmp.Compare(b.Priority, a.Priority)
			case TieID:
				c = cmp.Compare(a.ID, b.ID)
			}
			if c != 0 {
				return c
			}
		}
		return cmp.Compare(x.i, y.i)
	})
	return cs
}

// pick leases an account for req (nil: no route call) and returns its name,
// or "" when none is available.
func (pl *pool) pick(req *RequestView) string {
	pl.t.Helper()
	var key string
	if req != nil {
		res, err := pl.p.Route(req)
		if err != nil {
			pl.t.Fatalf("route: %v", err)
		}
		key = res.StickyKey
	}
	cs := pl.candidates()
	if len(cs) == 0 {
		return ""
	}
	k := pl.p.Knobs()
	if pl.noJitter {
		k.Jitter = 0
	}
	i := cs[k.PickRank(len(cs), pl.rnd)].i
	if key != "" {
		if j, ok := pl.sticky[key]; ok && slices.ContainsFunc(cs, func(c cand) bool { return c.i == j }) {
			i = j
		}
		pl.sticky[key] = i
	}
	pl.seq++
	pl.last[i] = pl.seq
	pl.accts[i].InFlight++
	pl.accts[i].Requests++
	return pl.accts[i].Name
}

// release ends one lease of the named account successfully.
func (pl *pool) release(name string) {
	a := pl.byName(name)
	a.InFlight--
	a.Successes++
	a.SuccessStreak++
}

func (pl *pool) byName(name string) *AccountView {
	for i := range pl.accts {
		if pl.accts[i].Name == name {
			return &pl.accts[i]
		}
	}
	pl.t.Fatalf("no account %q", name)
	return nil
}

// secs converts float seconds to a Duration.
func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// acct is an active account with a limit of 4 and no history.
func acct(name string) AccountView {
	return AccountView{ID: name, Name: name, Provider: "codex", Status: "active", MaxInFlight: 4, EWMASuccess: 1}
}

func TestSmartScores(t *testing.T) {
	p := mustBuiltin(t, "smart")
	ago := func(d time.Duration) time.Time { return testNow.Add(-d) }
	with := func(name string, edit func(a *AccountView)) AccountView {
		a := acct(name)
		edit(&a)
		return a
	}
	week := func(used float64, resets time.Duration) []UsageWindow {
		return []UsageWindow{{Name: "7d", UsedPercent: used, WindowMinutes: 10080, ResetsAt: testNow.Add(resets)}}
	}
	cases := []struct {
		a       AccountView
		score   float64 // math.NaN(): excluded
		tier    Tier
		recheck time.Duration
	}{
		{acct("fresh"), 100, TierHealthy, 0},
		// A success streak wins back penalties but never lifts an account
		// above a fresh one (it would take every request: issue 18).
		{with("streak-3", func(a *AccountView) { a.SuccessStreak = 3 }), 100, TierHealthy, 0},
		{with("streak-capped", func(a *AccountView) { a.SuccessStreak = 40 }), 100, TierHealthy, 0},
		{with("streak-after-5xx", func(a *AccountView) { a.SuccessStreak, a.LastFailure.Transient = 3, ago(10*time.Second) }), 94, TierHealthy, 65 * time.Second},
		{with("streak-after-429", func(a *AccountView) { a.SuccessStreak, a.LastFailure.Rate = 40, ago(30*time.Second) }), 90, TierHealthy, secs(3600.0/22 - 30)},
		// 401 a minute ago: −50 (one point per 1728 s), −6 for the streak of one.
		{with("401", func(a *AccountView) { a.LastFailure.Auth, a.FailureStreak = ago(time.Minute), 1 }), 44, TierRisky, 1728*time.Second - time.Minute},
		// 12 hours later half the 401 penalty is gone (25 steps of 1728 s = 43200 s).
		{with("401-12h", func(a *AccountView) { a.LastFailure.Auth = ago(12 * time.Hour) }), 75, TierWarm, 1728 * time.Second},
		{with("401-25h", func(a *AccountView) { a.LastFailure.Auth = ago(25 * time.Hour) }), 100, TierHealthy, 0},
		// 429 (rate) 30 s ago, two failures in a row: −22 −12; a point drops every 3600/22 s.
		{with("429", func(a *AccountView) { a.LastFailure.Rate, a.FailureStreak = ago(30*time.Second), 2 }), 66, TierWarm, secs(3600.0/22 - 30)},
		// quota and rate: the later of the two counts, once; 31 min = 11 steps.
		{with("429-both", func(a *AccountView) {
			a.LastFailure.Quota, a.LastFailure.Rate = ago(50*time.Minute), ago(31*time.Minute)
		}), 89, TierHealthy, secs(12*3600.0/22 - 1860)},
		{with("timeout", func(a *AccountView) { a.LastFailure.Timeout = ago(10 * time.Second) }), 82, TierHealthy, 40 * time.Second},
		{with("5xx", func(a *AccountView) { a.LastFailure.Transient = ago(10 * time.Second) }), 88, TierHealthy, 65 * time.Second},
		{with("5xx-14min", func(a *AccountView) { a.LastFailure.Transient = ago(14 * time.Minute) }), 99, TierHealthy, 60 * time.Second},
		{with("5xx-15min", func(a *AccountView) { a.LastFailure.Transient = ago(15 * time.Minute) }), 100, TierHealthy, 0},
		{with("streak-of-failures", func(a *AccountView) { a.FailureStreak = 9 }), 76, TierWarm, 0},
		{with("usage-70", func(a *AccountView) { a.Windows = week(70, 10*time.Hour) }), 90, TierHealthy, 10 * time.Hour},
		{with("usage-100", func(a *AccountView) { a.Windows = week(100, 2*time.Hour) }), 60, TierWarm, 2 * time.Hour},
		{with("usage-69", func(a *AccountView) { a.Windows = week(69, 2*time.Hour) }), 100, TierHealthy, 0},
		{with("usage-reset-passed", func(a *AccountView) { a.Windows = week(100, -time.Minute) }), 100, TierHealthy, 0},
		{with("usage-5h-only", func(a *AccountView) {
			a.Windows = []UsageWindow{{Name: "5h", UsedPercent: 100, WindowMinutes: 300, ResetsAt: testNow.Add(time.Hour)}}
		}), 100, TierHealthy, 0},
		{with("latency-5s", func(a *AccountView) { a.EWMALatency = 5 * time.Second }), 96, TierHealthy, 0},
		{with("latency-20s", func(a *AccountView) { a.EWMALatency = 20 * time.Second }), 85, TierHealthy, 0},
		{with("success-70", func(a *AccountView) { a.Successes, a.Failures, a.EWMASuccess = 7, 3, 0.7 }), 92, TierHealthy, 0},
		{with("success-40", func(a *AccountView) { a.Successes, a.Failures, a.EWMASuccess = 4, 6, 0.4 }), 85, TierHealthy, 0},
		{with("no-outcomes-yet", func(a *AccountView) { a.EWMASuccess = 0 }), 100, TierHealthy, 0},
		{with("everything", func(a *AccountView) {
			a.LastFailure = FailureTimes{Auth: ago(time.Second), Rate: ago(time.Second), Timeout: ago(time.Second), Transient: ago(time.Second)}
			a.FailureStreak, a.Windows, a.EWMALatency = 4, week(120, time.Hour), 30*time.Second
			a.Successes, a.Failures, a.EWMASuccess = 1, 9, 0.1
		}), 100 - 50 - 22 - 18 - 12 - 24 - 40 - 15 - 15, TierRisky, 49 * time.Second},
		{with("cooling", func(a *AccountView) { a.Status, a.CooldownUntil = "cooling", testNow.Add(90*time.Second) }), math.NaN(), 0, 90 * time.Second},
		{with("cooled", func(a *AccountView) { a.Status, a.CooldownUntil = "cooling", ago(time.Second) }), 100, TierHealthy, 0},
		{with("unauthorized", func(a *AccountView) { a.Status = "unauthorized" }), math.NaN(), 0, 0},
		{with("banned", func(a *AccountView) { a.Status = "banned" }), math.NaN(), 0, 0},
		{with("disabled", func(a *AccountView) { a.Status = "disabled" }), math.NaN(), 0, 0},
	}
	for _, c := range cases {
		s, ok, tier, recheck, err := p.Score(&c.a, testNow)
		if err != nil {
			t.Fatalf("%s: %v", c.a.Name, err)
		}
		if math.IsNaN(c.score) {
			if ok || recheck != c.recheck {
				t.Errorf("%s: score %v ok=%v recheck %v, want excluded with recheck %v", c.a.Name, s, ok, recheck, c.recheck)
			}
			continue
		}
		if !ok || s != c.score || tier != c.tier || (recheck-c.recheck).Abs() > time.Millisecond {
			t.Errorf("%s: %v %v %v %v, want %v true %v %v", c.a.Name, s, ok, tier, recheck, c.score, c.tier, c.recheck)
		}
	}
}

// TestSmartRecheckSteps follows a 5xx penalty through its steps: the score
// is constant until recheck_after, then one point better.
func TestSmartRecheckSteps(t *testing.T) {
	p := mustBuiltin(t, "smart")
	a := acct("a")
	a.LastFailure.Transient = testNow
	now, prev := testNow, 88.0
	for step := 0; step < 13; step++ {
		s, _, _, recheck, err := p.Score(&a, now)
		if err != nil {
			t.Fatal(err)
		}
		if s != prev {
			t.Fatalf("step %d at +%v: score %v, want %v", step, now.Sub(testNow), s, prev)
		}
		if step == 12 {
			if s != 100 || recheck != 0 {
				t.Fatalf("after 15 min: %v %v, want 100 and no recheck", s, recheck)
			}
			break
		}
		if before, _, _, _, _ := p.Score(&a, now.Add(recheck-time.Millisecond)); before != s {
			t.Fatalf("step %d: score changed before recheck_after", step)
		}
		now, prev = now.Add(recheck), prev+1
	}
}

// TestSmartTiersAndJitter: a warm account gets half its limit, a risky one a
// single lease; the accounts of the best score band share the picks.
func TestSmartTiersAndJitter(t *testing.T) {
	p := mustBuiltin(t, "smart")
	k := p.Knobs()
	if k.TopK != 3 || k.Jitter != 0.15 || k.ScoreBand != 10 || !slices.Equal(k.TieBreak, []TieBreak{TieLeastInflight, TieLeastRecent}) {
		t.Fatalf("knobs top_k %d jitter %v score_band %v tie_break %v", k.TopK, k.Jitter, k.ScoreBand, k.TieBreak)
	}
	for tier, want := range map[Tier]int{TierHealthy: 8, TierWarm: 4, TierRisky: 1} {
		if got := k.Limit(tier, 8); got != want {
			t.Errorf("Limit(%v, 8) = %d, want %d", tier, got, want)
		}
	}

	warm, risky := acct("warm"), acct("risky")
	warm.LastFailure.Rate, warm.FailureStreak = testNow, 1 // 72: warm
	risky.LastFailure.Auth = testNow                       // 50 − … : risky
	risky.FailureStreak = 2
	pl := newPool(t, p, warm, risky)
	pl.noJitter = true
	var got []string
	for range 4 {
		got = append(got, pl.pick(nil))
	}
	if want := []string{"warm", "warm", "risky", ""}; !slices.Equal(got, want) {
		t.Fatalf("picks without releases = %v, want %v (warm capped at 2 of 4, risky at 1)", got, want)
	}

	// Four healthy accounts whose scores differ within the top band of 10
	// points, and one a band lower; every lease is released at once.
	var accts []AccountView
	for i, name := range []string{"s0", "s1", "s2", "s3"} {
		a := acct(name)
		a.LastFailure.Transient = testNow.Add(-time.Duration(15-3*i) * time.Minute) // 100, 97, 94, 91
		accts = append(accts, a)
	}
	low := acct("low")
	low.LastFailure.Transient = testNow // 88
	accts = append(accts, low)
	pl = newPool(t, p, accts...)
	counts := map[string]int{}
	const n = 10000
	for range n {
		name := pl.pick(nil)
		counts[name]++
		pl.byName(name).InFlight-- // release without changing the scores
	}
	// The top band takes turns (least recently used first): a quarter each;
	// the jitter picks among the best three of the same band. The account a
	// band lower is never picked while four better ones are free.
	for name, want := range map[string]float64{"s0": 0.25, "s1": 0.25, "s2": 0.25, "s3": 0.25, "low": 0} {
		if got := float64(counts[name]) / n; math.Abs(got-want) > 0.02 {
			t.Errorf("%s picked %.3f of the time, want %.2f", name, got, want)
		}
	}
}

func TestRoundRobin(t *testing.T) {
	p := mustBuiltin(t, "round_robin")
	cooling := acct("d")
	cooling.Status, cooling.CooldownUntil = "cooling", testNow.Add(time.Minute)
	pl := newPool(t, p, acct("a"), acct("b"), acct("c"), cooling)
	var got []string
	for range 7 {
		name := pl.pick(nil)
		got = append(got, name)
		pl.release(name)
	}
	if want := []string{"a", "b", "c", "a", "b", "c", "a"}; !slices.Equal(got, want) {
		t.Fatalf("picks = %v, want %v", got, want)
	}
	// When d's cooldown is over it joins the rotation, first since it was never granted.
	pl.now = testNow.Add(2 * time.Minute)
	got = got[:0]
	for range 4 {
		name := pl.pick(nil)
		got = append(got, name)
		pl.release(name)
	}
	if want := []string{"d", "b", "c", "a"}; !slices.Equal(got, want) {
		t.Fatalf("picks after d's cooldown = %v, want %v", got, want)
	}
}

func TestLeastInflight(t *testing.T) {
	p := mustBuiltin(t, "least_inflight")
	a, b, c := acct("a"), acct("b"), acct("c")
	a.InFlight, b.InFlight, c.MaxInFlight = 3, 1, 8 // shares 3/4, 1/4, 0/8
	pl := newPool(t, p, a, b, c)
	var got []string
	for range 6 { // no releases: each pick raises the share of the account picked
		got = append(got, pl.pick(nil))
	}
	// c 0 → b and c tie at 1/4? c after one pick is 1/8 < 1/4: c again; at 2/8 it ties with b,
	// and b (granted less recently) wins.
	if want := []string{"c", "c", "b", "c", "c", "b"}; !slices.Equal(got, want) {
		t.Fatalf("picks = %v, want %v", got, want)
	}
}

func TestSticky(t *testing.T) {
	p := mustBuiltin(t, "sticky")
	if p.Knobs().StickyTTL != time.Hour {
		t.Fatalf("sticky_ttl = %v", p.Knobs().StickyTTL)
	}
	pl := newPool(t, p, acct("a"), acct("b"), acct("c"))
	s1 := &RequestView{Model: "gpt-5", SessionKey: "s1", APIKey: APIKeyView{ID: "k1"}}
	s2 := &RequestView{Model: "gpt-5", SessionKey: "s2", APIKey: APIKeyView{ID: "k1"}}
	first := pl.pick(s1)
	pl.release(first)
	other := pl.pick(s2)
	pl.release(other)
	if other == first {
		t.Fatalf("two sessions share %s while others are idle", first)
	}
	for range 5 {
		if got := pl.pick(s1); got != first {
			t.Fatalf("session s1 moved from %s to %s", first, got)
		}
		pl.release(first)
	}
	// The account cools down: the session moves, and stays on its new account.
	cool := pl.byName(first)
	cool.Status, cool.CooldownUntil = "cooling", testNow.Add(time.Hour)
	moved := pl.pick(s1)
	pl.release(moved)
	if moved == first || moved == "" {
		t.Fatalf("session s1 picked %q while %s cools", moved, first)
	}
	cool.Status = "active"
	if got := pl.pick(s1); got != moved {
		t.Fatalf("session s1 went back to %s, want it to stay on %s", got, moved)
	}

	// Without a session key the API key and model are the key; without either, no stickiness.
	res, err := p.Route(&RequestView{Model: "gpt-5", APIKey: APIKeyView{ID: "k9"}})
	if err != nil || res.StickyKey != "key:k9:gpt-5" {
		t.Fatalf("route without session = %+v, %v", res, err)
	}
	if res, err := p.Route(&RequestView{Model: "gpt-5"}); err != nil || res.StickyKey != "" {
		t.Fatalf("route without keys = %+v, %v", res, err)
	}
}

func TestQuotaReset(t *testing.T) {
	p := mustBuiltin(t, "quota_reset")
	win := func(name string, used float64, resets time.Duration) UsageWindow {
		return UsageWindow{Name: name, UsedPercent: used, WindowMinutes: 300, ResetsAt: testNow.Add(resets)}
	}
	soon, later, latest, spent, unknown := acct("soon"), acct("later"), acct("latest"), acct("spent"), acct("unknown")
	soon.Windows = []UsageWindow{win("5h", 40, time.Hour), win("7d", 10, 90*time.Hour)}
	later.Windows = []UsageWindow{win("5h", 10, 3*time.Hour)}
	latest.Windows = []UsageWindow{win("5h", 0, 4*time.Hour), win("old", 90, -time.Hour)}
	spent.Windows = []UsageWindow{win("5h", 20, 10*time.Minute), win("7d", 100, 30*time.Hour)}
	pl := newPool(t, p, unknown, latest, later, spent, soon)

	var got []string
	for range 13 { // no releases: 4 leases each fill an account
		got = append(got, pl.pick(nil))
	}
	want := []string{"soon", "soon", "soon", "soon", "later", "later", "later", "later", "latest", "latest", "latest", "latest", "unknown"}
	if !slices.Equal(got, want) {
		t.Fatalf("picks = %v, want %v", got, want)
	}
	// The spent account is excluded until its 7-day window resets, and asks to be rechecked then.
	_, ok, _, recheck, err := p.Score(&spent, testNow)
	if err != nil || ok || recheck != 30*time.Hour {
		t.Fatalf("spent: ok=%v recheck=%v err=%v, want excluded until the reset in 30h", ok, recheck, err)
	}
	if _, _, _, recheck, _ := p.Score(&soon, testNow); recheck != time.Hour {
		t.Fatalf("soon: recheck %v, want 1h", recheck)
	}
}

func TestWeighted(t *testing.T) {
	p := mustBuiltin(t, "weighted")
	heavy, medium, light, byPriority, off := acct("heavy"), acct("medium"), acct("light"), acct("prio"), acct("off")
	heavy.Tags = []string{"region:eu", "weight:5"}
	medium.Tags = []string{"weight:2"}
	byPriority.Priority = 2
	off.Tags = []string{"weight:0"}
	pl := newPool(t, p, heavy, medium, light, byPriority, off)
	counts := map[string]int{}
	for range 1000 {
		name := pl.pick(nil)
		counts[name]++
		pl.release(name)
	}
	// Weights 5, 2, 1, 2 (priority), 0: shares of 1,000 picks.
	for name, want := range map[string]int{"heavy": 500, "medium": 200, "light": 100, "prio": 200, "off": 0} {
		if got := counts[name]; got < want-2 || got > want+2 {
			t.Errorf("%s picked %d times, want %d±2 (counts %v)", name, got, want, counts)
		}
	}
}
