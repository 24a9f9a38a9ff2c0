//go:build !race

package scripts

import "testing"

// Allocation baselines of the hot paths (Go 1.26, gopher-lua v1.1.2). Score
// allocates only to box values that do not fit the caches: the id and name
// strings when the source names them (smart does not); numbers are boxed in
// pages of numberPage (the view's, `now`, math.floor's and the like) and
// Lua's own arithmetic in gopher-lua's blocks, amortized below one
// allocation a call.
func TestScoreAllocs(t *testing.T) {
	p := mustBuiltin(t, "smart")
	views := benchViews(100, testNow)
	i := 0
	rotating := testing.AllocsPerRun(1000, func() {
		p.Score(&views[i%len(views)], testNow)
		i++
	})
	if rotating > 0 {
		t.Errorf("smart Score over varied views: %v allocs, baseline 0 (5 before numbers were boxed in pages)", rotating)
	}
	same := testing.AllocsPerRun(1000, func() { p.Score(&views[0], testNow) })
	if same > 0 {
		t.Errorf("smart Score of one view: %v allocs, baseline 0", same)
	}
	plain := mustBuiltin(t, "smart") // no route function
	req := RequestView{Model: "gpt-5"}
	if n := testing.AllocsPerRun(1000, func() { plain.Route(&req) }); n != 0 {
		t.Errorf("Route without route(): %v allocs, want 0", n)
	}
}
