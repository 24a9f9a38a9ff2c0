package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFleetKill runs three real `troupe serve` processes with
// fleet.ownership on one PostgreSQL and Redis, in front of a mock upstream
// that counts answers in flight per credential. Under concurrent load
// spread over the three, no account ever has more than its max_concurrency
// in flight. Then one instance is killed with SIGKILL: every account
// serves again from the two survivors within the TTLs, and still none is
// over-admitted.
func TestFleetKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three gateways")
	}
	clearTroupeEnv(t)
	const (
		// 30 accounts so that each of three instances owns some: with 12,
		// rendezvous hashing leaves one owning none in about 2 % of runs.
		accounts = 30
		limit    = 2
		ttl      = fleetTTL
	)
	f := newFleetFixture(t, "fleet-kill", accounts, limit)
	up, secret := f.up, f.secret
	var gws []*serveChild
	for range 3 {
		gws = append(gws, f.start()) // announcing the listen address: the instances reach each other
	}
	owners := f.settled(gws...) // the accounts split over three instances
	split := map[*serveChild]int{}
	for _, g := range owners {
		split[g]++
	}
	if split[gws[0]] == 0 || split[gws[1]] == 0 || split[gws[2]] == 0 {
		t.Fatalf("owned by the three: %d, %d, %d; want some each", split[gws[0]], split[gws[1]], split[gws[2]])
	}

	client := &http.Client{Timeout: 60 * time.Second}
	load := func(to []*serveChild, n int) []string {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var fails []string
		for i := range n {
			g := to[i%len(to)]
			wg.Go(func() {
				req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`))
				req.Header.Set("Authorization", "Bearer "+secret)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					fails = append(fails, err.Error())
					mu.Unlock()
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					mu.Lock()
					fails = append(fails, fmt.Sprintf("%d %s", resp.StatusCode, body))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return fails
	}
	overAdmitted := func(when string) {
		t.Helper()
		for _, name := range f.names {
			if st := up.Stats(name); st.MaxInFlight > limit {
				t.Errorf("%s: account %s had %d answers in flight, max_concurrency %d", when, name, st.MaxInFlight, limit)
			}
		}
	}
	if fails := load(gws, 150); len(fails) > 0 {
		t.Fatalf("%d of 150 requests failed, first: %s", len(fails), fails[0])
	}
	overAdmitted("three instances")
	served := 0
	for _, name := range f.names {
		if up.Stats(name).Requests > 0 {
			served++
		}
	}
	if served != accounts {
		t.Fatalf("%d of %d accounts served under load over three instances", served, accounts)
	}

	// kill -9 the third: its accounts serve again from the two others.
	killed := gws[2]
	lost := killed.ownedAccounts()
	if err := killed.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	up.ResetStats()
	survivors := gws[:2]
	eventually(t, 30*time.Second, "the survivors own every account", func() (bool, string) {
		a, b := survivors[0].ownedAccounts(), survivors[1].ownedAccounts()
		return a+b == accounts, fmt.Sprintf("owned %d + %d", a, b)
	})
	recovered := time.Since(at)
	t.Logf("the killed instance's %d accounts owned again %v after the kill (fleet.ttl %v, heartbeat 200ms)", lost, recovered.Round(10*time.Millisecond), ttl)
	if recovered > 3*ttl {
		t.Errorf("recovery took %v, want within about the TTL (%v) and a few heartbeats", recovered, ttl)
	}
	if fails := load(survivors, 150); len(fails) > 0 {
		t.Fatalf("%d of 150 requests failed after the kill, first: %s", len(fails), fails[0])
	}
	overAdmitted("after the kill")
	for _, name := range f.names {
		if up.Stats(name).Requests == 0 {
			t.Errorf("account %s not served by the survivors", name)
		}
	}
}
