package scripts

import (
	"testing"
	"time"
)

// FuzzCompile feeds arbitrary source to Compile and, when it compiles, runs
// score and route once on a sample view: nothing may panic, and the
// counters Reads reports must be a subset of FieldsAll. Budgets are small so
// a runaway input ends quickly.
func FuzzCompile(f *testing.F) {
	for _, name := range Builtins() {
		src, _ := Builtin(name)
		f.Add(src)
	}
	f.Add(`function score(a, now) return a.inflight end`)
	f.Add(`function score(a) local k = "in" .. "flight" return a[k] end`)
	f.Add(`function score(a) for k in pairs(a) do end return a[ [[requests]] ] end`)
	f.Add(`function score(a) while true do end end`)
	f.Add(`local s = "x" function score(a) for i = 1, 40 do s = s .. s end return 1 end`)
	opts := Options{ScoreInstructions: 20_000, RouteInstructions: 20_000, LoadInstructions: 20_000,
		ScoreTimeout: 20 * time.Millisecond, RouteTimeout: 20 * time.Millisecond, LoadTimeout: 20 * time.Millisecond}
	now := time.Unix(1772366400, 0)
	views := SampleViews(now)
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 4096 {
			return
		}
		if r := scanSource(src).reads; r&^FieldsAll != 0 {
			t.Fatalf("readsOf = %b, outside FieldsAll", r)
		}
		p, err := Compile("fuzz", src, opts)
		if err != nil {
			return
		}
		defer p.Close()
		_, _, _, _, _ = p.Score(&views[0], now)
		_, _ = p.Route(&RequestView{Model: "m", Protocol: "chat.completions"})
	})
}
