package scripts

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// benchView is a typical account: a few tags, a 5-hour and a 7-day window,
// a transient failure a minute ago.
func benchView(i int, now time.Time) AccountView {
	return AccountView{
		ID: "acct-" + strconv.Itoa(i), Name: "codex-" + strconv.Itoa(i), Provider: "codex", Plan: "plus",
		Tags: []string{"region:eu", "weight:" + strconv.Itoa(1+i%5)}, Priority: i % 3,
		Status: "active", InFlight: i % 4, MaxInFlight: 4,
		Requests: uint64(1000 + i), Successes: uint64(950 + i), Failures: 50, SuccessStreak: i % 9, FailureStreak: 0,
		LastFailure: FailureTimes{Transient: now.Add(-time.Duration(i%900) * time.Second)},
		EWMASuccess: 0.93, EWMALatency: time.Duration(1500+i%9000) * time.Millisecond, EWMATTFT: 700 * time.Millisecond,
		Windows: []UsageWindow{
			{Name: "5h", UsedPercent: float64(i % 100), WindowMinutes: 300, ResetsAt: now.Add(2 * time.Hour)},
			{Name: "7d", UsedPercent: float64(i % 110), WindowMinutes: 10080, ResetsAt: now.Add(60 * time.Hour)},
		},
	}
}

func benchViews(n int, now time.Time) []AccountView {
	vs := make([]AccountView, n)
	for i := range vs {
		vs[i] = benchView(i, now)
	}
	return vs
}

// BenchmarkScore measures one score call per shipped policy over a rotating
// set of 1,000 typical views, and reports the VM instructions per call.
func BenchmarkScore(b *testing.B) {
	views := benchViews(1000, testNow)
	for _, name := range Builtins() {
		b.Run(name, func(b *testing.B) {
			p := mustBuiltin(b, name)
			b.ReportAllocs()
			i, instr := 0, int64(0)
			for b.Loop() {
				if _, _, _, _, err := p.Score(&views[i%len(views)], testNow); err != nil {
					b.Fatal(err)
				}
				instr += p.sb.budget.n
				i++
			}
			b.ReportMetric(float64(instr)/float64(i), "instr/op")
		})
	}
}

// BenchmarkScoreBudget separates the cost of the budget for smart: "armed"
// is Score as shipped; "unchecked" removes the context from the state, so
// the VM skips its per-instruction Done call (the timer is still armed and
// disarmed); "arm" is arming and disarming alone.
func BenchmarkScoreBudget(b *testing.B) {
	views := benchViews(1000, testNow)
	b.Run("armed", func(b *testing.B) {
		p := mustBuiltin(b, "smart")
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p.Score(&views[i%len(views)], testNow)
			i++
		}
	})
	b.Run("unchecked", func(b *testing.B) {
		p := mustBuiltin(b, "smart")
		p.sb.L.RemoveContext()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p.Score(&views[i%len(views)], testNow)
			i++
		}
	})
	b.Run("arm", func(b *testing.B) {
		bg := newBudget()
		b.ReportAllocs()
		for b.Loop() {
			bg.start(1000, time.Second)
			bg.stop()
		}
	})
}

// BenchmarkViewStrategies compares ways to hand a view to score (smart):
// "reuse" refills one guarded table per state with the fields the source
// names (what Score does), "reuse-all" refills every field, "fresh" builds
// new tables per call, "proxy" reads the reused table through an empty
// read-only proxy (__index), which would make even existing fields
// unwritable.
func BenchmarkViewStrategies(b *testing.B) {
	views := benchViews(1000, testNow)
	run := func(b *testing.B, table func(p *Policy, a *AccountView) *lua.LTable) {
		p := mustBuiltin(b, "smart")
		L := p.sb.L
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			L.Push(p.score)
			L.Push(table(p, &views[i%len(views)]))
			L.Push(lua.LNumber(unixSeconds(testNow)))
			p.sb.budget.start(p.opts.ScoreInstructions, p.opts.ScoreTimeout)
			err := L.PCall(2, 3, nil)
			p.sb.budget.stop()
			if err != nil {
				b.Fatal(err)
			}
			L.Pop(3)
			i++
		}
	}
	b.Run("reuse", func(b *testing.B) {
		run(b, func(p *Policy, a *AccountView) *lua.LTable { return p.acct.fill(a) })
	})
	b.Run("reuse-all", func(b *testing.B) {
		run(b, func(p *Policy, a *AccountView) *lua.LTable { p.acct.want = viewFieldsAll; return p.acct.fill(a) })
	})
	b.Run("fresh", func(b *testing.B) {
		run(b, func(p *Policy, a *AccountView) *lua.LTable { return newAccountTable(p.sb, p.view, p.writeFree).fill(a) })
	})
	b.Run("proxy", func(b *testing.B) {
		var proxy *lua.LTable
		run(b, func(p *Policy, a *AccountView) *lua.LTable {
			t := p.acct.fill(a)
			if proxy == nil {
				proxy = p.sb.readOnlyProxy(t)
			}
			return proxy
		})
	})
	b.Run("fill-only", func(b *testing.B) {
		p := mustBuiltin(b, "smart")
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			p.acct.fill(&views[i%len(views)])
			i++
		}
	})
}

// BenchmarkRoute measures a route call (sticky) and the no-route fast path.
func BenchmarkRoute(b *testing.B) {
	req := RequestView{Model: "gpt-5", Protocol: "responses", Stream: true, APIKey: APIKeyView{ID: "key-1", Name: "ci"}, SessionKey: "sess-42", ClientIP: "203.0.113.7"}
	for _, name := range []string{"sticky", "smart"} {
		b.Run(name, func(b *testing.B) {
			p := mustBuiltin(b, name)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Route(&req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReload measures Compile plus SelfTest of smart (no pool sample),
// the cost of a hot reload before the swap.
func BenchmarkReload(b *testing.B) {
	src, _ := Builtin("smart")
	b.ReportAllocs()
	for b.Loop() {
		p, err := Compile("smart", src, testOptions)
		if err != nil {
			b.Fatal(err)
		}
		if err := SelfTest(p, nil); err != nil {
			b.Fatal(err)
		}
		p.Close()
	}
}

// BenchmarkRescore100k scores 100,000 views with smart: one op is a full
// rescore, the scheduler's work after a policy change (target: under 1 s).
func BenchmarkRescore100k(b *testing.B) {
	views := benchViews(100_000, testNow)
	p := mustBuiltin(b, "smart")
	b.ReportAllocs()
	for b.Loop() {
		for i := range views {
			if _, _, _, _, err := p.Score(&views[i], testNow); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(views)), "ns/account")
}

func ExampleCompile() {
	p, err := Compile("prefer-eu", `
policy = { top_k = 2, jitter = 0.1 }
function score(a, now)
  if a.status ~= "active" then return nil end
  for _, t in ipairs(a.tags) do
    if t == "region:eu" then return 10 end
  end
  return 1
end`, Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	s, ok, tier, _, err := p.Score(&AccountView{Status: "active", Tags: []string{"region:eu"}, MaxInFlight: 2}, time.Now())
	fmt.Println(s, ok, tier, err)
	// Output: 10 true healthy <nil>
}
