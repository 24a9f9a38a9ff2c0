package scenarios

import (
	"testing"

	"github.com/troupe-gw/troupe/bench/scenario"
)

func TestShippedScenariosParse(t *testing.T) {
	want := []string{"10k-accounts", "burst", "failover", "faults-30pct", "long-streams", "many-open-streams", "smoke", "steady"}
	names := Names()
	if len(names) != len(want) {
		t.Fatalf("shipped %v, want %v", names, want)
	}
	for i, n := range names {
		if n != want[i] {
			t.Fatalf("shipped %v, want %v", names, want)
		}
		src, err := Source(n)
		if err != nil {
			t.Fatal(err)
		}
		s, err := scenario.Parse(src)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if s.Name != n {
			t.Errorf("%s.yaml is named %q", n, s.Name)
		}
	}
	if _, err := Source("nope"); err == nil {
		t.Fatal("unknown scenario found")
	}
}
