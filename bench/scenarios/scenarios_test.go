package scenarios

import (
	"reflect"
	"testing"

	"github.com/troupe-gw/troupe/bench/scenario"
)

func TestShippedScenariosParse(t *testing.T) {
	want := []string{"10k-accounts", "burst", "failover", "faults-30pct", "fleet", "long-streams", "many-open-streams", "peers", "smoke", "steady"}
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

// The peers scenario is the chat phases of steady (what another gateway can
// serve: no Responses API, no WebSocket, no hold, no failover) on the
// 10k-accounts set-up, so a side-by-side run measures Troupe and the peers
// on the same phases as Troupe's own steady runs.
func TestPeersIsSteadysChatPhases(t *testing.T) {
	parse := func(name string) *scenario.Scenario {
		t.Helper()
		src, err := Source(name)
		if err != nil {
			t.Fatal(err)
		}
		s, err := scenario.Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	peers, steady := parse("peers"), parse("steady")
	var want []scenario.Phase
	for _, p := range steady.Phases {
		if p.API == scenario.Chat {
			want = append(want, p)
		}
	}
	if !reflect.DeepEqual(peers.Phases, want) {
		t.Errorf("peers phases %+v\nwant steady's chat phases %+v", peers.Phases, want)
	}
	if peers.Accounts != 10000 || peers.Gateway.Policy != "smart" || peers.Failover != nil || peers.HasHold() {
		t.Errorf("peers: %d accounts, policy %q, failover %v, hold %v; want 10,000, smart, none, none",
			peers.Accounts, peers.Gateway.Policy, peers.Failover, peers.HasHold())
	}
	if !reflect.DeepEqual(peers.Mock, steady.Mock) || peers.Model != steady.Model {
		t.Errorf("peers mock %+v model %q, steady's %+v %q", peers.Mock, peers.Model, steady.Mock, steady.Model)
	}
}
