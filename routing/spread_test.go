package routing

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
)

func TestSpreadOf(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	even := SpreadOf([]int{5, 5, 5, 5}, 4)
	if even.Gini != 0 || even.Busiest != 5 || even.BusiestShare != 0.25 || even.Top1Accounts != 1 || even.Top1Share != 0.25 || even.Serving != 4 {
		t.Errorf("even: %+v", even)
	}
	// One account of 250 takes everything: Gini (n−1)/n, the busiest 1 %
	// (3 accounts) all of it.
	one := SpreadOf([]int{241}, 250)
	if !near(one.Gini, 249.0/250) || one.BusiestShare != 1 || one.Top1Accounts != 3 || one.Top1Share != 1 || !near(one.Top1Even, 3.0/250) || one.Serving != 1 {
		t.Errorf("one of 250: %+v", one)
	}
	// The demo before issue 18: 125 of 241 requests on one account, the rest
	// on four more, of 250.
	demo := SpreadOf([]int{125, 40, 30, 26, 20}, 250)
	if demo.BusiestShare < 0.5 || demo.Gini < 0.95 || demo.Serving != 5 {
		t.Errorf("demo: %+v", demo)
	}
	// Two equal halves of the accounts, one with twice the other's requests:
	// Gini 1/6 (Σ|xi−xj| / (2n²·mean)).
	if g := SpreadOf([]int{1, 1, 2, 2}, 4).Gini; !near(g, 1.0/6) {
		t.Errorf("Gini of 1,1,2,2 = %v, want 1/6", g)
	}
	if z := SpreadOf(nil, 10); z.Requests != 0 || z.Gini != 0 || z.Accounts != 10 || z.String() != "no requests over 10 accounts" {
		t.Errorf("no requests: %+v %q", z, z.String())
	}
	if z := SpreadOf(nil, 0); z.Accounts != 0 || z.Top1Accounts != 0 {
		t.Errorf("no accounts: %+v", z)
	}
}

// Issue 18: over 250 equally good accounts the default policy spreads the
// load (the busiest account near 1/250 of the requests, a low Gini),
// where a policy that rewards success streaks above a fresh account, as
// smart did, sends nearly everything to a few.
func TestSimulateSpreadsEqualAccounts(t *testing.T) {
	if testing.Short() {
		t.Skip("routes 5,000 requests through 250 accounts")
	}
	smart, _ := scripts.Builtin("smart")
	const streaky = `
policy = { top_k = 3, jitter = 0.15 }
function score(a, now) return 100 + math.min(2 * a.success_streak, 12) end`
	opts := SimulateOptions{Accounts: 250, Requests: 5000, Concurrency: 4, Seed: 1, Healthy: true}
	rep, err := Simulate(context.Background(), compile(t, "smart", smart), opts)
	if err != nil {
		t.Fatal(err)
	}
	sp := rep.Spread
	t.Logf("smart: %s", sp)
	if rep.Unserved != 0 || sp.Requests != 5000 || sp.Accounts != 250 {
		t.Fatalf("report: %+v", rep)
	}
	if sp.BusiestShare > 2.0/250 || sp.Top1Share > 2*sp.Top1Even || sp.Gini > 0.1 || sp.Serving != 250 {
		t.Errorf("smart does not spread over equal accounts: %s", sp)
	}
	rep, err = Simulate(context.Background(), compile(t, "streaky", streaky), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("streak bonus: %s", rep.Spread)
	if rep.Spread.Top1Share < 0.5 || rep.Spread.Gini < 0.9 {
		t.Errorf("the spread does not show a streak bonus's concentration: %s", rep.Spread)
	}
}

// SimulatePool spreads a steady load over a pool as stored: under smart,
// every one of 40 equal accounts serving two models in two groups takes
// its share; disabled accounts take none.
func TestSimulatePool(t *testing.T) {
	var accounts []storage.Account
	for i := range 42 {
		a := storage.Account{ID: fmt.Sprintf("id-%02d", i), Name: fmt.Sprintf("acct-%02d", i), Provider: storage.ProviderOpenAI,
			Models: []string{[]string{"m1", "m2"}[i%2]}, Group: []string{"", "team"}[i/2%2], MaxConcurrency: 4}
		if i >= 40 {
			a.Disabled = true
		}
		accounts = append(accounts, a)
	}
	smart, _ := scripts.Builtin("smart")
	load, err := SimulatePool(context.Background(), compile(t, "smart", smart), accounts, 400)
	if err != nil {
		t.Fatal(err)
	}
	if load.Unserved != 0 || load.Spread.Accounts != 40 || load.Spread.Serving != 40 || load.Spread.Busiest > 12 || load.Spread.Gini > 0.1 {
		t.Errorf("smart over 40 equal accounts: %+v, %s", load, load.Spread)
	}
	empty, err := SimulatePool(context.Background(), compile(t, "smart", smart), nil, 100)
	if err != nil || empty.Requests != 0 || empty.Spread.Accounts != 0 {
		t.Errorf("an empty pool: %+v, %v", empty, err)
	}
}
