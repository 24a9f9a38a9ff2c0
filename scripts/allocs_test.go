//go:build !race

package scripts

import "testing"

// Allocation baselines of the hot paths (Go 1.26, gopher-lua v1.1.2). Score
// allocates only to box values that do not fit the caches: the id and name
// strings, `now`, and numbers that differ from the previous call and are not
// small integers; Lua's own arithmetic allocates in amortized blocks.
func TestScoreAllocs(t *testing.T) {
	p := mustBuiltin(t, "smart")
	views := benchViews(100, testNow)
	i := 0
	rotating := testing.AllocsPerRun(1000, func() {
		p.Score(&views[i%len(views)], testNow)
		i++
	})
	if rotating > 5 {
		t.Errorf("smart Score over varied views: %v allocs, baseline 5", rotating)
	}
	same := testing.AllocsPerRun(1000, func() { p.Score(&views[0], testNow) })
	if same > 2 {
		t.Errorf("smart Score of one view: %v allocs, baseline 2 (name, now: smart never reads id)", same)
	}
	plain := mustBuiltin(t, "smart") // no route function
	req := RequestView{Model: "gpt-5"}
	if n := testing.AllocsPerRun(1000, func() { plain.Route(&req) }); n != 0 {
		t.Errorf("Route without route(): %v allocs, want 0", n)
	}
}
