package fleet

import (
	"fmt"
	"testing"
)

// Rendezvous hashing spreads accounts evenly and, when a member joins,
// moves only the accounts the newcomer takes.
func TestOwnerSpreadAndMoves(t *testing.T) {
	three := []Member{{ID: "gw-a"}, {ID: "gw-b"}, {ID: "gw-c"}}
	four := append(append([]Member(nil), three...), Member{ID: "gw-d"})
	const n = 30000
	count := map[string]int{}
	moved := 0
	for i := range n {
		acc := fmt.Sprintf("019a%08d-account", i)
		before, after := Owner(acc, three), Owner(acc, four)
		count[before]++
		if before != after {
			moved++
			if after != "gw-d" {
				t.Fatalf("account %s moved from %s to %s, not to the newcomer", acc, before, after)
			}
		}
	}
	for id, c := range count {
		if c < n/3*9/10 || c > n/3*11/10 {
			t.Errorf("%s owns %d of %d accounts, want within 10%% of %d", id, c, n, n/3)
		}
	}
	if moved < n/4*9/10 || moved > n/4*11/10 {
		t.Errorf("%d of %d accounts moved when a fourth member joined, want about a quarter", moved, n)
	}
	if Owner("x", nil) != "" {
		t.Error("an empty set has an owner")
	}
	// The weights are fixed, so instances of different builds agree.
	if w := weight("gw-a", "acct-1"); w != 0x6b791dac29da3789 {
		t.Errorf("weight(gw-a, acct-1) = %#x: the hash changed, and with it every owner", w)
	}
	if Owner("acct-1", three) != Owner("acct-1", []Member{three[2], three[0], three[1]}) {
		t.Error("the owner depends on the members' order")
	}
}
