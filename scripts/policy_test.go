package scripts

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// TestViewFields checks the Lua view of an account and of a request field
// by field, with the documented types and units.
func TestViewFields(t *testing.T) {
	// The policy returns its dump as an error message (level 0: no position).
	p := mustCompile(t, "fields", `
local function dump(v, out, prefix)
  for k, x in pairs(v) do
    if type(x) == "table" then dump(x, out, prefix .. tostring(k) .. ".")
    else out[#out + 1] = prefix .. tostring(k) .. "=" .. tostring(x) end
  end
end
function score(a, now)
  local out = {"now=" .. tostring(now)}
  dump(a, out, "")
  table.sort(out)
  error(table.concat(out, " "), 0)
end
function route(r)
  local out = {}
  dump(r, out, "")
  table.sort(out)
  error(table.concat(out, " "), 0)
end`)
	a := AccountView{
		ID: "id1", Name: "acct one", Provider: "codex", Plan: "pro", Group: "g", Tags: []string{"t1", "weight:2"}, Priority: 3,
		Status: "cooling", CooldownUntil: time.Unix(1700000100, 500_000_000), CooldownReason: "rate",
		InFlight: 1, MaxInFlight: 4, Requests: 10, Successes: 7, Failures: 2, SuccessStreak: 0, FailureStreak: 2,
		LastFailure: FailureTimes{Rate: time.Unix(1700000000, 0)},
		EWMASuccess: 0.75, EWMALatency: 1500 * time.Millisecond, EWMATTFT: 250 * time.Millisecond,
		Windows: []UsageWindow{{Name: "5h", UsedPercent: 42.5, WindowMinutes: 300, ResetsAt: time.Unix(1700003600, 0),
			BurnRate: 12.5, ExhaustsAt: time.Unix(1700002000, 0)}},
	}
	_, _, _, _, err := p.Score(&a, time.Unix(1700000050, 0))
	want := "active_limit= cooldown_reason=rate cooldown_until=1.7000001005e+09 ewma_latency_ms=1500 ewma_success=0.75 ewma_ttft_ms=250 " +
		"failure_streak=2 failures=2 group=g id=id1 inflight=1 last_failure.rate=1700000000 max_inflight=4 name=acct one " +
		"now=1700000050 plan=pro priority=3 provider=codex requests=10 status=cooling success_streak=0 successes=7 " +
		"tags.1=t1 tags.2=weight:2 usage_windows.1.burn_rate=12.5 usage_windows.1.exhausts_at=1700002000 usage_windows.1.name=5h usage_windows.1.resets_at=1700003600 " +
		"usage_windows.1.used_percent=42.5 usage_windows.1.window_minutes=300"
	// tostring prints numbers with %.14g: 1.7000001005e+09 is 1700000100.5.
	if err == nil || err.(*Error).Msg != want {
		t.Fatalf("account view:\n got %v\nwant %s", err, want)
	}
	_, err = p.Route(&RequestView{Model: "gpt-5", Protocol: "responses", Stream: true, APIKey: APIKeyView{ID: "k", Name: "ci", Group: "team"}, SessionKey: "s", ClientIP: "10.0.0.1"})
	want = "api_key.group=team api_key.id=k api_key.name=ci client_ip=10.0.0.1 model=gpt-5 protocol=responses session_key=s stream=true"
	if err == nil || err.(*Error).Msg != want {
		t.Fatalf("request view:\n got %v\nwant %s", err, want)
	}
}

// TestDocsListEveryField keeps docs/policies.md in step with the views and knobs.
func TestDocsListEveryField(t *testing.T) {
	doc, err := os.ReadFile("../docs/policies.md")
	if err != nil {
		t.Fatal(err)
	}
	sb := newSandbox("doc", Options{}.withDefaults())
	at := newAccountTable(sb, viewFieldsAll, false)
	v := SampleViews(testNow)[0]
	v.CooldownUntil = testNow
	v.Windows = []UsageWindow{{ResetsAt: testNow}}
	v.LastFailure = FailureTimes{Quota: testNow, Rate: testNow, Auth: testNow, Banned: testNow, Transient: testNow, Timeout: testNow}
	var names []string
	collect := func(t *lua.LTable) {
		t.ForEach(func(k, _ lua.LValue) {
			if s, ok := k.(lua.LString); ok {
				names = append(names, string(s))
			}
		})
	}
	collect(at.fill(&v))
	collect(at.lastFailure)
	collect(at.windowTabs[0].t)
	rt := newRequestTable(sb)
	collect(rt.fill(&RequestView{}))
	collect(rt.apiKey)
	names = append(names, "description", "top_k", "jitter", "tie_break", "concurrency", "sticky_ttl", "max_attempts",
		"group", "provider", "model", "tags", "sticky_key", "max_attempts", "healthy", "warm", "risky",
		"least_recent", "least_inflight", "priority", "id")
	for _, n := range names {
		if !bytes.Contains(doc, []byte("`"+n+"`")) {
			t.Errorf("docs/policies.md does not mention `%s`", n)
		}
	}
	for _, n := range Builtins() {
		if !bytes.Contains(doc, []byte("`"+n+"`")) {
			t.Errorf("docs/policies.md does not mention the shipped policy `%s`", n)
		}
	}
}

func TestRouteResult(t *testing.T) {
	p := mustCompile(t, "route", `
function score() return 1 end
function route(r)
  if r.model == "none" then return nil end
  return { group = "g", provider = "openai", model = "gpt-5-mini", tags = { "eu", "fast" },
           sticky_key = r.session_key, max_attempts = 2 }
end`)
	if !p.HasRoute() {
		t.Fatal("HasRoute = false")
	}
	res, err := p.Route(&RequestView{Model: "gpt-5", SessionKey: "s1"})
	want := RouteResult{Group: "g", Provider: "openai", Model: "gpt-5-mini", Tags: []string{"eu", "fast"}, StickyKey: "s1", MaxAttempts: 2}
	if err != nil || res.Group != want.Group || res.Provider != want.Provider || res.Model != want.Model ||
		!slices.Equal(res.Tags, want.Tags) || res.StickyKey != want.StickyKey || res.MaxAttempts != want.MaxAttempts {
		t.Fatalf("Route = %+v, %v; want %+v", res, err, want)
	}
	if res, err := p.Route(&RequestView{Model: "none"}); err != nil || res.Tags != nil || res.Group != "" {
		t.Fatalf("Route(none) = %+v, %v", res, err)
	}
	noRoute := mustCompile(t, "plain", "function score() return 1 end")
	if noRoute.HasRoute() {
		t.Fatal("HasRoute without route")
	}
	if res, err := noRoute.Route(&RequestView{Model: "x"}); err != nil || res.MaxAttempts != 0 {
		t.Fatalf("Route without route = %+v, %v", res, err)
	}
}

// TestClone: a clone has its own state and the same identity.
func TestClone(t *testing.T) {
	p := mustBuiltin(t, "smart")
	c, err := p.Clone()
	if err != nil {
		t.Fatal(err)
	}
	if c.sb == p.sb || c.Digest() != p.Digest() || c.Name() != p.Name() || c.Knobs().TopK != 3 {
		t.Fatal("clone shares the state or lost its identity")
	}
	done := make(chan struct{})
	go func() { // the clone runs on another goroutine while p runs here (-race checks)
		defer close(done)
		v := freshView()
		for range 1000 {
			if s, _, _, _, err := c.Score(&v, testNow); err != nil || s != 100 {
				t.Errorf("clone: %v %v", s, err)
				return
			}
		}
	}()
	v := freshView()
	for range 1000 {
		if s, _, _, _, err := p.Score(&v, testNow); err != nil || s != 100 {
			t.Fatalf("original: %v %v", s, err)
		}
	}
	<-done
}

func TestPrintLogsAtDebug(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := Compile("chatty", "function score(a) print('scoring', a.name, 1.5) return 1 end", Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	v := freshView()
	p.Score(&v, testNow)
	if !strings.Contains(buf.String(), `msg="policy print" policy=chatty msg="scoring\ta1\t1.5"`) {
		t.Fatalf("log = %q", buf.String())
	}
	quiet := mustCompile(t, "quiet", "function score(a) print('x') return 1 end") // no logger: discarded
	if _, _, _, _, err := quiet.Score(&v, testNow); err != nil {
		t.Fatal(err)
	}
}

func TestRandomIsSeeded(t *testing.T) {
	src := "function score() return math.random(1, 1000000) + math.random() end"
	run := func(seed uint64) float64 {
		p, err := Compile("rand", src, Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		v := freshView()
		s, _, _, _, err := p.Score(&v, testNow)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if run(42) != run(42) || run(42) == run(43) {
		t.Fatal("math.random does not follow Options.Seed")
	}
	p := mustCompile(t, "rand", "function score() return math.random(0) end")
	v := freshView()
	if _, _, _, _, err := p.Score(&v, testNow); err == nil || !strings.Contains(err.Error(), "interval is empty") {
		t.Fatalf("math.random(0) = %v", err)
	}
}

func TestRecheckClamp(t *testing.T) {
	p := mustCompile(t, "r", "function score(a) return 1, nil, a.priority / 1000 end")
	v := freshView()
	for prio, want := range map[int]time.Duration{0: 0, 1: MinRecheck, 5000: 5 * time.Second} {
		v.Priority = prio
		if _, _, _, r, err := p.Score(&v, testNow); err != nil || r != want {
			t.Errorf("recheck_after %v s: got %v %v, want %v", float64(prio)/1000, r, err, want)
		}
	}
}

func TestErrorShape(t *testing.T) {
	_, err := Compile("smart", "function score(a)\n  local x\n  return x()\nend", Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := mustCompile(t, "smart", "function score(a)\n\n  return nil_function()\nend")
	v := freshView()
	_, _, _, _, err = p.Score(&v, testNow)
	var pe *Error
	if !errors.As(err, &pe) || !errors.Is(err, ErrRuntime) || pe.Line != 3 || pe.Policy != "smart" {
		t.Fatalf("err = %#v", err)
	}
	if got := err.Error(); got != "policy smart:3: attempt to call a non-function object" {
		t.Fatalf("Error() = %q", got)
	}
}

func TestRouterConcurrent(t *testing.T) {
	r := NewRouter(mustBuiltin(t, "sticky"), 2)
	done := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 200 {
				res, err := r.Route(&RequestView{Model: "m", APIKey: APIKeyView{ID: "k"}, SessionKey: strings.Repeat("s", g+i%3)})
				if err == nil && res.StickyKey != strings.Repeat("s", g+i%3) && !(g+i%3 == 0 && res.StickyKey == "key:k:m") {
					err = errors.New("wrong sticky key " + res.StickyKey)
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if len(r.idle) > 2 {
		t.Fatalf("%d idle clones, want at most 2", len(r.idle))
	}
	plain := NewRouter(mustBuiltin(t, "smart"), 0)
	if _, err := plain.Route(&RequestView{}); err != nil || len(plain.idle) != 0 {
		t.Fatalf("a router without route cloned: %v, %d idle", err, len(plain.idle))
	}
}

// TestScoreNilView: a host bug (a nil view) is an error, not a panic, and
// the policy keeps working.
func TestScoreNilView(t *testing.T) {
	p := mustBuiltin(t, "smart")
	if _, ok, _, recheck, err := p.Score(nil, testNow); err == nil || ok || recheck != ErrorRecheck {
		t.Fatalf("Score(nil) = %v %v %v", ok, recheck, err)
	}
	v := freshView()
	if s, _, _, _, err := p.Score(&v, testNow); err != nil || s != 100 {
		t.Fatalf("after the panic: %v %v", s, err)
	}
}

// A source past MaxSourceBytes is refused before it is parsed.
func TestSourceSizeLimit(t *testing.T) {
	src := "function score(a, now) return 1 end\n"
	if _, err := Compile("ok", src+"--"+strings.Repeat("x", MaxSourceBytes-len(src)-3)+"\n", Options{}); err != nil {
		t.Fatalf("a source of exactly the limit: %v", err)
	}
	_, err := Compile("big", src+"--"+strings.Repeat("x", MaxSourceBytes)+"\n", Options{})
	var pe *Error
	if !errors.As(err, &pe) || !errors.Is(pe.Kind, ErrSyntax) || !strings.Contains(pe.Msg, "at most 262144") {
		t.Fatalf("oversized source: %v", err)
	}
}

// A fill writes only the fields the source names; a field read through a
// computed key is written at that read, right, and by every fill after it;
// pairs sees every field.
func TestLazyViewFields(t *testing.T) {
	p, err := Compile("lazy", "function score(a, now) return a[a.tags[1]] end\n", Options{})
	if err != nil {
		t.Fatal(err)
	}
	v := SampleViews(testNow)[0]
	v.Tags, v.Successes, v.Requests = []string{"successes"}, 7, 9
	if s, ok, _, _, err := p.Score(&v, testNow); err != nil || !ok || s != 7 {
		t.Fatalf("score via a computed key: %v %v %v", s, ok, err)
	}
	if p.acct.t.RawGetString("requests") != lua.LNil {
		t.Errorf("a field the source never names was written")
	}
	v.Successes = 11
	if s, _, _, _, _ := p.Score(&v, testNow); s != 11 {
		t.Errorf("second call read successes %v, want 11", s)
	}
	if p.acct.want&(1<<vfSuccesses) == 0 {
		t.Errorf("a field read once is not written by later fills")
	}
	q, err := Compile("all", "function score(a, now)\n  local n = 0\n  for _ in pairs(a) do n = n + 1 end\n  return n\nend\n", Options{})
	if err != nil {
		t.Fatal(err)
	}
	v.CooldownUntil, v.Windows, v.Credits = testNow, []UsageWindow{{Name: "5h"}}, &Credits{}
	v.LastFailure = FailureTimes{Quota: testNow}
	if s, _, _, _, err := q.Score(&v, testNow); err != nil || int(s) != numViewFields {
		t.Errorf("pairs over the view: %v fields (%v), want %d", s, err, numViewFields)
	}
}

// The Codex limit fields: the active limit, credits and the per-model limit
// families, each family with its models, windows and cooldown.
func TestViewLimitFields(t *testing.T) {
	p := mustCompile(t, "limits", `
local function dump(v, out, prefix)
  for k, x in pairs(v) do
    if type(x) == "table" then dump(x, out, prefix .. tostring(k) .. ".")
    else out[#out + 1] = prefix .. tostring(k) .. "=" .. tostring(x) end
  end
end
function score(a, now)
  local out = {"active_limit=" .. a.active_limit}
  dump({credits = a.credits, limit_families = a.limit_families}, out, "")
  table.sort(out)
  error(table.concat(out, " "), 0)
end`)
	a := AccountView{ID: "id1", Status: "active", MaxInFlight: 1, ActiveLimit: "premium", Credits: &Credits{HasCredits: true, Balance: "5.39"},
		Families: []LimitFamily{{ID: "bengalfox", LimitName: "gpt-5.2-codex-sonic", Models: []string{"sonic-alias"}, CoolingUntil: time.Unix(1700007200, 0),
			Windows: []UsageWindow{{Name: "7d", UsedPercent: 100, WindowMinutes: 10080, ResetsAt: time.Unix(1700007200, 0)}}}},
	}
	_, _, _, _, err := p.Score(&a, time.Unix(1700000050, 0))
	want := "active_limit=premium credits.balance=5.39 credits.has_credits=true credits.unlimited=false " +
		"limit_families.1.cooling_until=1700007200 limit_families.1.id=bengalfox limit_families.1.limit_name=gpt-5.2-codex-sonic limit_families.1.models.1=sonic-alias " +
		"limit_families.1.usage_windows.1.burn_rate=0 limit_families.1.usage_windows.1.name=7d limit_families.1.usage_windows.1.resets_at=1700007200 " +
		"limit_families.1.usage_windows.1.used_percent=100 limit_families.1.usage_windows.1.window_minutes=10080"
	if err == nil || err.(*Error).Msg != want {
		t.Fatalf("limit fields:\n got %v\nwant %s", err, want)
	}
	// The next account has none: the tables empty, credits nil.
	a.Credits, a.Families, a.ActiveLimit = nil, nil, ""
	_, _, _, _, err = p.Score(&a, time.Unix(1700000050, 0))
	if err == nil || err.(*Error).Msg != "active_limit=" {
		t.Fatalf("no limits: %v", err)
	}
}

// TestSampleViewsDescribed: every sample account troupe policy check ranks
// says what it stands for (the newcomer could not tell what "zero" or
// "cooled" were).
func TestSampleViewsDescribed(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range SampleViews(time.Now()) {
		d := SampleDescription(v)
		if d == "" {
			t.Errorf("sample %q (%s) has no description", v.Name, v.ID)
		}
		if seen[d] {
			t.Errorf("two samples described %q", d)
		}
		seen[d] = true
	}
	if len(seen) != len(sampleWhat) {
		t.Errorf("%d samples described, %d descriptions: one is stale", len(seen), len(sampleWhat))
	}
	if d := SampleDescription(AccountView{ID: "acc-1", Name: "mine"}); d != "" {
		t.Errorf("an account of one's own described as %q", d)
	}
}
