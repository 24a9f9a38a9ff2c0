package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFleetJoin adds an instance under load (issue 17, "add an instance
// under load"): two real `troupe serve` processes with fleet.ownership on
// one PostgreSQL and Redis serve concurrent requests in front of a mock
// upstream that counts answers in flight per credential; a third starts
// while the load runs. Only the newcomer's share of the accounts moves
// (every account that changes owner goes to it), it ends up owning about a
// third, no account ever has more than its max_concurrency in flight
// during the move, and no request fails but with the documented retryable
// 503 no_account_available.
func TestFleetJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three gateways")
	}
	clearTroupeEnv(t)
	const (
		accounts = 30
		limit    = 2
		workers  = 24 // under the 60 slots of the fleet: requests wait little
	)
	f := newFleetFixture(t, "fleet-join", accounts, limit)
	up, names, secret := f.up, f.names, f.secret
	gws := []*serveChild{f.start(), f.start()}
	f.settled(gws...) // the accounts split over two instances, as both see them

	client := &http.Client{Timeout: 60 * time.Second}
	// owners reads each account's owner instance ID, as g sees them.
	owners := func(g *serveChild) (self string, out map[string]string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, g.base+"/api/admin/fleet", nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var fl struct {
			Self     string `json:"self"`
			Accounts []struct {
				ID    string `json:"id"`
				Owner string `json:"owner"`
			} `json:"accounts"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&fl); err != nil {
			t.Fatal(err)
		}
		out = map[string]string{}
		for _, a := range fl.Accounts {
			out[a.ID] = a.Owner
		}
		return fl.Self, out
	}
	_, before := owners(gws[0])
	if len(before) != accounts {
		t.Fatalf("GET /api/admin/fleet lists %d accounts, want %d", len(before), accounts)
	}

	// Load: workers send back to back, round robin over the instances in
	// targets (the newcomer is added once it has joined), until stop.
	var targets atomic.Pointer[[]*serveChild]
	targets.Store(&[]*serveChild{gws[0], gws[1]})
	var (
		done      atomic.Int64
		retryable atomic.Int64
		mu        sync.Mutex
		fails     []string
		wg        sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				to := *targets.Load()
				g := to[i%len(to)]
				req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`))
				req.Header.Set("Authorization", "Bearer "+secret)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					mu.Lock()
					fails = append(fails, err.Error())
					mu.Unlock()
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == 200:
				case resp.StatusCode == 503 && strings.Contains(string(body), "no_account_available") && resp.Header.Get("Retry-After") != "":
					retryable.Add(1) // documented retryable (docs/fleet.md)
				default:
					mu.Lock()
					fails = append(fails, fmt.Sprintf("%s: %d %s", g.base, resp.StatusCode, body))
					mu.Unlock()
				}
				done.Add(1)
			}
		})
	}
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()
	served := func(n int64) func() (bool, string) {
		return func() (bool, string) {
			d := done.Load()
			return d >= n, fmt.Sprintf("%d answered", d)
		}
	}
	eventually(t, 60*time.Second, "the load under way on two instances", served(100))

	// The third joins under load.
	newcomer := f.start()
	joinedAt := done.Load()
	gws = append(gws, newcomer)
	f.settled(gws...) // the accounts split over three instances
	targets.Store(&[]*serveChild{gws[0], gws[1], gws[2]})
	moved := done.Load()
	eventually(t, 60*time.Second, "the load served by three instances", served(moved+200))
	halt()

	mu.Lock()
	if len(fails) > 0 {
		t.Errorf("%d of %d requests failed, first: %s", len(fails), done.Load(), fails[0])
	}
	mu.Unlock()
	t.Logf("%d requests answered (%d before the join, %d while the accounts moved), %d retryable 503",
		done.Load(), joinedAt, moved-joinedAt, retryable.Load())
	for id, name := range names {
		if st := up.Stats(name); st.MaxInFlight > limit {
			t.Errorf("account %s (%s) had %d answers in flight, max_concurrency %d", name, id, st.MaxInFlight, limit)
		}
	}

	// Only the newcomer's share moved, and it is about a third. The
	// admin API's owner is the lease holder: read it once the newcomer's
	// count agrees with it (no lease between two holders).
	var self string
	var after map[string]string
	mine := 0
	eventually(t, 30*time.Second, "the newcomer's owned accounts as its admin API lists them", func() (bool, string) {
		self, after = owners(newcomer)
		mine = 0
		for _, o := range after {
			if o == self {
				mine++
			}
		}
		o := newcomer.ownedAccounts()
		return o == mine, fmt.Sprintf("troupe_fleet_owned_accounts %d, admin API %d", o, mine)
	})
	for id, was := range before {
		now := after[id]
		if now != was && now != self {
			t.Errorf("account %s moved from %s to %s, not to the newcomer %s", names[id], was, now, self)
		}
	}
	// Rendezvous over random member IDs: Binomial(30, 1/3), mean 10, sd 2.6.
	if mine < accounts/3-6 || mine > accounts/3+6 {
		t.Errorf("the newcomer owns %d of %d accounts, want about a third", mine, accounts)
	}
	t.Logf("the newcomer %s owns %d of %d accounts", self, mine, accounts)
}
