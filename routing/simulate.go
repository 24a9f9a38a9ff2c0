package routing

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// SimulateOptions size a synthetic simulation (Simulate).
type SimulateOptions struct {
	Accounts    int    // synthetic accounts, at least 1
	Requests    int    // requests to route, at least 1
	Concurrency int    // requests in flight at once (each holds its lease about 1 ms), at least 1
	Seed        uint64 // random seed of the synthetic outcomes
	// Healthy makes every account behave as a healthy one (no failures,
	// no slow answers): equally good accounts, to see how the policy
	// spreads load among them.
	Healthy bool
}

// SimReport is what Simulate saw.
type SimReport struct {
	Policy    string
	Requests  int
	Accounts  int
	Unserved  int            // requests that got no account
	Tiers     map[string]int // the policy's verdicts on the final views: healthy, warm, risky, excluded
	ByAccount []SimAccount   // every account that served, most requests first
	Spread    Spread         // how evenly the served requests spread over all Accounts
}

// SimAccount is one synthetic account's share of a simulation.
type SimAccount struct {
	Name     string
	Requests int
	Verdict  *Verdict // the policy's verdict on its final view (nil: none)
	Profile  string   // how it behaves: healthy, "50% 5xx", "20% 429" or slow
}

// Synthetic account profiles: every 10th account fails half its requests
// with a 5xx, every 7th one in five with a 429, every 5th is slow; with
// healthy (SimulateOptions.Healthy) every account is healthy.
func simProfile(i int, healthy bool) string {
	switch {
	case healthy:
	case i%10 == 0:
		return "50% 5xx"
	case i%7 == 0:
		return "20% 429"
	case i%5 == 0:
		return "slow"
	}
	return "healthy"
}

// simOutcome is the outcome of a request to synthetic account i (of
// profile simProfile(i, healthy)).
func simOutcome(i int, healthy bool, rng *rand.Rand) actors.Outcome {
	out := actors.Outcome{Status: 200, Latency: 800 * time.Millisecond, TTFT: 300 * time.Millisecond}
	switch {
	case healthy:
	case i%10 == 0 && rng.IntN(2) == 0:
		out = actors.Outcome{Status: 500, Verdict: upstream.Verdict{Class: upstream.ClassTransient}}
	case i%7 == 0 && rng.IntN(5) == 0:
		out = actors.Outcome{Status: 429, Verdict: upstream.Verdict{Class: upstream.ClassRate, RetryAfter: 30 * time.Second}}
	case i%5 == 0:
		out.Latency, out.TTFT = 12*time.Second, 6*time.Second
	}
	return out
}

// Simulate routes o.Requests synthetic requests with p through a Sim of
// o.Accounts synthetic accounts (named sim-00000…, each with the profile
// simProfile gives its number), o.Concurrency at a time, feeding back the
// profiles' outcomes, and reports where they went and how evenly.
func Simulate(ctx context.Context, p *scripts.Policy, o SimulateOptions) (*SimReport, error) {
	if o.Accounts < 1 || o.Requests < 1 || o.Concurrency < 1 {
		return nil, errors.New("simulation: accounts, requests and concurrency must be at least 1")
	}
	accounts := make([]storage.Account, o.Accounts)
	index := make(map[string]int, o.Accounts)
	for i := range accounts {
		name := fmt.Sprintf("sim-%05d", i)
		accounts[i] = storage.Account{ID: name, Name: name, Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxConcurrency: 4}
		index[name] = i
	}
	sim, err := NewSim(ctx, accounts, p, nil)
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	picks, unserved := simRun(ctx, sim, index, o)
	verdicts, err := sim.Rank(time.Now())
	if err != nil {
		return nil, err
	}
	rep := &SimReport{Policy: p.Name(), Requests: o.Requests, Accounts: o.Accounts, Unserved: unserved,
		Tiers: map[string]int{"healthy": 0, "warm": 0, "risky": 0, "excluded": 0}}
	byName := make(map[string]*Verdict, len(verdicts))
	for i := range verdicts {
		rep.Tiers[verdicts[i].TierName()]++
		byName[verdicts[i].View.Name] = &verdicts[i]
	}
	for name, n := range picks {
		rep.ByAccount = append(rep.ByAccount, SimAccount{Name: name, Requests: n, Verdict: byName[name], Profile: simProfile(index[name], o.Healthy)})
	}
	counts := make([]int, len(rep.ByAccount))
	for i, a := range rep.ByAccount {
		counts[i] = a.Requests
	}
	rep.Spread = SpreadOf(counts, o.Accounts)
	slices.SortFunc(rep.ByAccount, func(a, b SimAccount) int { return b.Requests - a.Requests })
	return rep, nil
}

// simRun routes o.Requests requests through sim on o.Concurrency workers and
// returns the requests each account served and how many got none.
func simRun(ctx context.Context, sim *Sim, index map[string]int, o SimulateOptions) (picks map[string]int, unserved int) {
	picks = map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan struct{})
	for wk := range o.Concurrency {
		rng := rand.New(rand.NewPCG(o.Seed+uint64(wk), o.Seed^0x9e3779b97f4a7c15))
		wg.Go(func() {
			for range next {
				l, err := sim.Acquire(ctx, actors.AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 5 * time.Second})
				mu.Lock()
				if err != nil {
					unserved++
				} else {
					picks[l.Name]++
				}
				mu.Unlock()
				if err != nil {
					continue
				}
				time.Sleep(time.Millisecond) // the lease is held, as a request would
				sim.Release(l, simOutcome(index[l.Name], o.Healthy, rng))
			}
		})
	}
	for range o.Requests {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	return picks, unserved
}

// PoolLoad is what SimulatePool saw: how the requests spread over the pool.
type PoolLoad struct {
	Requests int    // requests routed
	Unserved int    // of them, those that got no account
	Spread   Spread // over every account given
}

// SimulatePool routes requests synthetic requests with p through a Sim of
// accounts (the pool as stored; every account fresh and healthy), one at
// a time, each succeeding at once, and reports how evenly they spread: how
// p shares a steady load among the pool's accounts. Request i asks for the
// group and model of account i mod len(accounts) (its first model; an
// account serving any model is asked for one no other account names), so
// each group and model gets traffic in proportion to the accounts serving
// it. p serves as the Sim's policy (NewSim); disabled accounts are left
// out.
func SimulatePool(ctx context.Context, p *scripts.Policy, accounts []storage.Account, requests int) (*PoolLoad, error) {
	var pool []storage.Account
	for _, a := range accounts {
		if !a.Disabled {
			pool = append(pool, a)
		}
	}
	if len(pool) == 0 || requests < 1 {
		return &PoolLoad{Spread: SpreadOf(nil, len(pool))}, nil
	}
	sim, err := NewSim(ctx, pool, p, nil)
	if err != nil {
		return nil, err
	}
	defer sim.Close()
	picks := map[string]int{}
	load := &PoolLoad{Requests: requests}
	for i := range requests {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		a := &pool[i%len(pool)]
		model := "(any model)"
		if len(a.Models) > 0 {
			model = a.Models[0]
		}
		l, err := sim.Acquire(ctx, actors.AcquireRequest{Endpoint: translate.Chat, Model: model, Group: a.Group, MaxWait: time.Second})
		if err != nil {
			load.Unserved++
			continue
		}
		picks[l.AccountID]++
		sim.Release(l, actors.Outcome{Status: 200, Latency: 800 * time.Millisecond, TTFT: 300 * time.Millisecond})
	}
	counts := make([]int, 0, len(picks))
	for _, n := range picks {
		counts = append(counts, n)
	}
	load.Spread = SpreadOf(counts, len(pool))
	return load, nil
}
