package routing

import (
	"context"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/scripts"
)

func compile(t *testing.T, name, src string) *scripts.Policy {
	t.Helper()
	p, err := scripts.Compile(name, src, scripts.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Rank orders scored accounts before excluded ones, then by tier and
// score; ties keep the order given.
func TestRankOrder(t *testing.T) {
	p := compile(t, "by_priority", `function score(a, now)
  if a.priority < 0 then return nil end
  if a.priority == 0 then return 5, "warm" end
  return a.priority
end`)
	views := []scripts.AccountView{
		{Name: "excluded", Priority: -1}, {Name: "warm", Priority: 0}, {Name: "low", Priority: 1},
		{Name: "tie-a", Priority: 3}, {Name: "tie-b", Priority: 3},
	}
	got, err := Rank(p, views, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range got {
		names = append(names, v.View.Name+":"+v.TierName())
	}
	want := []string{"tie-a:healthy", "tie-b:healthy", "low:healthy", "warm:warm", "excluded:excluded"}
	for i := range want {
		if names[i] != want[i] {
			t.Fatalf("ranked %v, want %v", names, want)
		}
	}
	bad := compile(t, "bad", `function score(a, now) if a.name == "low" then error("boom") end return 1 end`)
	if _, err := Rank(bad, views, time.Now()); err == nil {
		t.Error("a score() error was not returned")
	}
}

// A synthetic simulation routes every request, through accounts that all
// exist, and the policy judges every account at the end.
func TestSimulate(t *testing.T) {
	src, _ := scripts.Builtin("smart")
	rep, err := Simulate(context.Background(), compile(t, "smart", src), SimulateOptions{Accounts: 12, Requests: 300, Concurrency: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	served, tiers := 0, 0
	for _, a := range rep.ByAccount {
		served += a.Requests
		if a.Verdict == nil || a.Profile == "" {
			t.Errorf("account %s has no verdict or profile", a.Name)
		}
	}
	for _, n := range rep.Tiers {
		tiers += n
	}
	if rep.Unserved != 0 || served != 300 || tiers != 12 || rep.Policy != "smart" {
		t.Errorf("report %+v: %d served, %d judged", rep, served, tiers)
	}
	if _, err := Simulate(context.Background(), compile(t, "smart", src), SimulateOptions{Accounts: 1}); err == nil {
		t.Error("a simulation of 0 requests was accepted")
	}
}
