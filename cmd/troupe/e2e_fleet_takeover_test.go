package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
)

// TestFleetKillHeldLeases runs three real `troupe serve` processes with
// fleet.ownership on one PostgreSQL and Redis, in front of a mock upstream
// that counts answers in flight per credential, with one account at
// max_concurrency 2. Each of the two instances that do not own it holds a
// lease its owner granted (a slow answer), and the owner is killed with
// SIGKILL while both run. The survivor that takes the account over counts
// both leases before it grants (troupe_fleet_remote_leases_adopted_total),
// so the requests sent meanwhile wait and the upstream never sees more
// than 2 in flight; both held answers complete, and their releases reach
// the new owner (its remote leases fall to 0, none ended by expiry).
func TestFleetKillHeldLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three gateways")
	}
	clearTroupeEnv(t)
	const (
		limit = 2
		// hold is how long the held answers take: longer than a takeover
		// (fleet.ttl 2 s and a few heartbeats), so the leases still run
		// when the survivor takes the account.
		hold = 8 * time.Second
	)
	f := newFleetFixture(t, "fleet-held", 1, limit)
	up, secret := f.up, f.secret
	var name string
	for _, n := range f.names {
		name = n
	}
	var gws []*serveChild
	for range 3 {
		gws = append(gws, f.start()) // announcing the listen address: the instances reach each other
	}
	// Settled: one instance owns the account, the rendezvous owner over
	// all three, and the two others index it; so the account does not move
	// away (a join's drain) while the test holds its leases.
	var owner *serveChild
	for _, g := range f.settled(gws...) {
		owner = g
	}
	var holders []*serveChild
	for _, g := range gws {
		if g != owner {
			holders = append(holders, g)
		}
	}

	client := &http.Client{Timeout: 60 * time.Second}
	send := func(g *serveChild) <-chan string {
		out := make(chan string, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/chat/completions",
				strings.NewReader(`{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Authorization", "Bearer "+secret)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				out <- err.Error()
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				out <- fmt.Sprintf("%d %s", resp.StatusCode, body)
				return
			}
			out <- ""
		}()
		return out
	}
	// Each non-owner holds a lease the owner granted: two slow answers.
	up.SetFault(name, &mock.Fault{Kind: mock.FaultSlowFirstToken, Rate: 1, Delay: hold})
	held := []<-chan string{send(holders[0]), send(holders[1])}
	eventually(t, 10*time.Second, "the upstream runs both held answers", func() (bool, string) {
		st := up.Stats(name)
		for i, ch := range held {
			select {
			case r := <-ch:
				t.Fatalf("held request %d ended before the kill: %q", i, r)
			default:
			}
		}
		// Each holder's answer runs on a lease the owner granted it: one
		// grant each (a second would be a failover, the other holder then
		// waiting for capacity).
		r0, r1 := holders[0].metric("troupe_fleet_remote_grants_received_total"), holders[1].metric("troupe_fleet_remote_grants_received_total")
		return st.InFlight == limit && r0 == 1 && r1 == 1,
			fmt.Sprintf("in flight %d, requests %d; grants received by the holders %v and %v (want 1 each); owner issued %v",
				st.InFlight, st.Requests, r0, r1, owner.metric("troupe_fleet_remote_grants_issued_total"))
	})
	up.SetFault(name, nil) // later answers are quick

	// kill -9 of the owner while both leases run.
	if err := owner.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	// Requests sent meanwhile wait for capacity: the new owner must count
	// the two held leases, not start at 0 in flight.
	var more []<-chan string
	for i := range 4 {
		more = append(more, send(holders[i%2]))
	}
	var newOwner, other *serveChild
	eventually(t, 30*time.Second, "a survivor owns the account and has counted the held leases", func() (bool, string) {
		a, b := holders[0].ownedAccounts(), holders[1].ownedAccounts()
		switch {
		case a == 1:
			newOwner, other = holders[0], holders[1]
		case b == 1:
			newOwner, other = holders[1], holders[0]
		default:
			return false, fmt.Sprintf("owned %d + %d", a, b)
		}
		n := newOwner.metric("troupe_fleet_remote_leases_adopted_total")
		return n == limit, fmt.Sprintf("owned by a survivor, %v leases adopted", n)
	})
	took := time.Since(at)
	if st := up.Stats(name); st.InFlight != limit {
		t.Fatalf("the held answers ended before the takeover (%v after the kill; in flight %d): the test proves nothing, raise hold", took, st.InFlight)
	}
	t.Logf("the killed owner's account owned again, its 2 held leases counted, %v after the kill (fleet.ttl %v, heartbeat 200ms)", took.Round(10*time.Millisecond), fleetTTL)
	if took > 4*fleetTTL {
		t.Errorf("takeover took %v, want within about the TTL (%v) and a few heartbeats", took, fleetTTL)
	}

	for i, ch := range append(held, more...) {
		select {
		case fail := <-ch:
			if fail != "" {
				t.Errorf("request %d failed: %s", i, fail)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("request %d did not end", i)
		}
	}
	if st := up.Stats(name); st.MaxInFlight > limit || st.Requests != 6 {
		t.Errorf("upstream saw %d requests, at most %d in flight; want 6, at most max_concurrency %d", st.Requests, st.MaxInFlight, limit)
	}
	// The held leases' releases reached the new owner: none is left, and
	// none ended by expiry (that would have taken the holder's death or an hour).
	eventually(t, 10*time.Second, "the new owner holds no remote lease", func() (bool, string) {
		n := newOwner.metric("troupe_fleet_remote_leases")
		return n == 0, fmt.Sprintf("%v remote leases", n)
	})
	if n := newOwner.metric(`troupe_fleet_remote_refused_total{reason="expired"}`); n > 0 {
		t.Errorf("%v adopted leases ended by expiry, not by their release", n)
	}
	if s := other.stderr.String(); strings.Contains(s, "release not delivered") {
		t.Errorf("a release was not delivered:\n%s", s)
	}
}
