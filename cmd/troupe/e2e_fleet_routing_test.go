package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"github.com/troupe-gw/troupe/bench/mock"
)

// TestFleetRouting runs three real `troupe serve` processes with
// fleet.ownership on one PostgreSQL and Redis, in front of a mock upstream
// that counts answers in flight per credential (docs/fleet.md, routing
// across instances). Every request goes to ONE instance: it is served by
// the accounts all three own (remote grants), and no account ever has
// more than its max_concurrency in flight. Then a cooldown learned by one
// instance (a 429 through a remote grant, reported to the owner with the
// release) is honoured by all three within a second.
func TestFleetRouting(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three gateways")
	}
	clearTroupeEnv(t)
	const (
		accounts = 12
		limit    = 2
	)
	f := newFleetFixture(t, "fleet-routing", accounts, limit)
	up, names, secret := f.up, f.names, f.secret
	var gws []*serveChild
	for range 3 {
		// No fleet.addr: each announces the address it listens on, where
		// the others reach its internal endpoint.
		gws = append(gws, f.start())
	}
	// Settled: the accounts split over the three, each indexing the
	// others'. Not each owning one: with 12 accounts rendezvous hashing
	// over random member IDs leaves one instance none in 2.3 % of runs
	// (3·(2/3)^12), which a wait for that never sees end.
	owners := f.settled(gws...)
	split := map[*serveChild]int{}
	for _, g := range owners {
		split[g]++
	}
	t.Logf("owned by the three: %d, %d, %d", split[gws[0]], split[gws[1]], split[gws[2]])

	client := &http.Client{Timeout: 60 * time.Second}
	ask := func(g *serveChild) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}

	// 1. Everything to the first instance.
	const n = 120
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fails []string
	for range n {
		wg.Go(func() {
			if status, body := ask(gws[0]); status != 200 {
				mu.Lock()
				fails = append(fails, fmt.Sprintf("%d %s", status, body))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(fails) > 0 {
		t.Fatalf("%d of %d requests to one instance failed, first: %s", len(fails), n, fails[0])
	}
	for id, name := range names {
		st := up.Stats(name)
		if st.MaxInFlight > limit {
			t.Errorf("account %s had %d answers in flight, max_concurrency %d", name, st.MaxInFlight, limit)
		}
		if st.Requests == 0 {
			t.Errorf("account %s (%s) not served through the first instance", name, id)
		}
	}
	issued := 0.0
	for _, g := range gws[1:] {
		issued += g.metric("troupe_fleet_remote_grants_issued_total")
	}
	received := gws[0].metric("troupe_fleet_remote_grants_received_total")
	t.Logf("first instance: %v remote grants received; the others issued %v", received, issued)
	if received <= 0 || received != issued {
		t.Errorf("remote grants: %v received by the first instance, %v issued by the others", received, issued)
	}

	// 2. A cooldown learned through one instance is honoured by all within a second.
	var fl struct {
		Self   string `json:"self"`
		Remote struct {
			Withheld *int `json:"withheld"`
		} `json:"remote"`
		Accounts []struct {
			ID    string `json:"id"`
			Owner string `json:"owner"`
		} `json:"accounts"`
	}
	req, _ := http.NewRequest(http.MethodGet, gws[0].base+"/api/admin/fleet", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&fl)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if w := fl.Remote.Withheld; w == nil || *w != 0 {
		t.Errorf("/api/admin/fleet remote.withheld = %v, want 0 (no takeover)", w)
	}
	var cooled string
	for _, a := range fl.Accounts {
		if a.Owner != fl.Self {
			cooled = names[a.ID]
			break
		}
	}
	if cooled == "" {
		t.Fatal("no account owned by another instance")
	}
	up.SetFault(cooled, &mock.Fault{Kind: mock.FaultRateLimitRetryAfter, RetryAfter: 10 * time.Minute})
	// Bursts that need every account: an instance picks the accounts it
	// runs first (docs/fleet.md, local first), so only a burst larger than
	// its own share reaches the others' accounts.
	burst := func(g int) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var fails []string
		for range accounts * limit {
			wg.Go(func() {
				if status, body := ask(gws[g]); status != 200 {
					mu.Lock()
					fails = append(fails, fmt.Sprintf("%d %s", status, body))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(fails) > 0 {
			t.Fatalf("instance %d: %d requests of a burst failed (the 429 must fail over), first: %s", g, len(fails), fails[0])
		}
	}
	var learned time.Time
	for i := 0; learned.IsZero(); i++ {
		if i > 10 {
			t.Fatalf("%s never asked through the first instance", cooled)
		}
		burst(0)
		if up.Stats(cooled).Faults > 0 {
			learned = time.Now()
		}
	}
	// Bursts to each instance in turn: each needs every available account,
	// so an instance that did not know of the cooldown would ask the cooled
	// account again.
	asked := [3]int{}
	for i := 0; ; i++ {
		g := i % 3
		faults := up.Stats(cooled).Faults
		sent := time.Now()
		burst(g)
		if up.Stats(cooled).Faults > faults && sent.Sub(learned) > time.Second {
			t.Fatalf("instance %d asked the cooled account %s %v after the cooldown was learned", g, cooled, sent.Sub(learned).Round(time.Millisecond))
		}
		if sent.Sub(learned) > time.Second {
			asked[g] += accounts * limit
		}
		if asked[0] >= 2*accounts*limit && asked[1] >= 2*accounts*limit && asked[2] >= 2*accounts*limit {
			break
		}
	}
	t.Logf("cooldown of %s honoured by all three: %v requests each after the first second, none to it", cooled, asked)
	// 3. Affinity across instances: a chain of previous_response_id
	// follow-ups, and sessions, keep their account whichever instance they
	// arrive at, whether it owns the account or asks its owner.
	respond := func(g *serveChild, body string, hdr ...string) (string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, g.base+"/v1/responses", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		req.Header.Set("Content-Type", "application/json")
		if len(hdr) == 2 {
			req.Header.Set(hdr[0], hdr[1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", g.base, resp.StatusCode, out)
		}
		return gjson.GetBytes(out, "id").Str, servedBy.FindString(gjson.GetBytes(out, "output.0.content.0.text").Str)
	}
	id, owner := respond(gws[0], `{"model":"gpt-4.1-mini","input":"hi"}`)
	if owner == "" {
		t.Fatal("the answer names no account")
	}
	for i := range 6 {
		var by string
		id, by = respond(gws[(i+1)%3], fmt.Sprintf(`{"model":"gpt-4.1-mini","input":"again","previous_response_id":%q}`, id))
		if by != owner {
			t.Fatalf("follow-up %d through instance %d served by %s, want %s", i, (i+1)%3, by, owner)
		}
	}
	for i := range 4 {
		session := fmt.Sprintf("fleet-sess-%d", i)
		_, first := respond(gws[0], `{"model":"gpt-4.1-mini","input":"hi"}`, "Session-Id", session)
		for g := 1; g < 3; g++ {
			if _, by := respond(gws[g], `{"model":"gpt-4.1-mini","input":"hi"}`, "Session-Id", session); by != first {
				t.Fatalf("session %s served by %s through instance %d, by %s through the first", session, by, g, first)
			}
		}
	}

	for _, g := range gws {
		if r := g.metric(`troupe_fleet_remote_refused_total{reason="forged"}`); r != 0 {
			t.Errorf("%s refused %v messages as forged", g.base, r)
		}
	}
}
