package routing

import (
	"fmt"
	"slices"
)

// Spread is how evenly a number of requests spread over a set of accounts:
// the figures Simulate, Replay and the admin simulation report, so that a
// policy that sends most requests to a few accounts shows at a glance.
type Spread struct {
	Accounts int // accounts counted, those that got no request included
	Requests int // requests counted
	Serving  int // accounts that got at least one request
	// Busiest is the request count of the busiest account; BusiestShare
	// its share of Requests (0–1). An even spread gives each account
	// 1/Accounts.
	Busiest      int
	BusiestShare float64
	// Top1Accounts is how many accounts make the busiest 1 % (1 % of
	// Accounts rounded up: at least one); Top1Share their share of the
	// requests (0–1), Top1Even that share under an even spread.
	Top1Accounts int
	Top1Share    float64
	Top1Even     float64
	// Gini is the Gini coefficient of the requests per account: 0 when
	// every account got the same number, (Accounts−1)/Accounts when one got
	// them all.
	Gini float64
}

// SpreadOf measures the spread of counts, the requests of each account that
// got any, over accounts accounts: those beyond len(counts) got none.
// accounts below len(counts) counts len(counts). Counts must not be
// negative.
func SpreadOf(counts []int, accounts int) Spread {
	n := max(accounts, len(counts))
	sp := Spread{Accounts: n}
	if n == 0 {
		return sp
	}
	sorted := make([]int, n) // ascending, the accounts without requests first
	copy(sorted[n-len(counts):], counts)
	slices.Sort(sorted)
	var weighted float64 // Σ i·x_i over the ascending order, i from 1
	for i, c := range sorted {
		sp.Requests += c
		if c > 0 {
			sp.Serving++
		}
		weighted += float64(i+1) * float64(c)
	}
	sp.Top1Accounts = (n + 99) / 100
	sp.Top1Even = float64(sp.Top1Accounts) / float64(n)
	if sp.Requests == 0 {
		return sp
	}
	total := float64(sp.Requests)
	sp.Busiest = sorted[n-1]
	sp.BusiestShare = float64(sp.Busiest) / total
	top := 0
	for _, c := range sorted[n-sp.Top1Accounts:] {
		top += c
	}
	sp.Top1Share = float64(top) / total
	sp.Gini = 2*weighted/(float64(n)*total) - float64(n+1)/float64(n)
	if sp.Gini < 0 { // rounding on an even spread
		sp.Gini = 0
	}
	return sp
}

// String is the spread in one line, as the CLI prints it.
func (sp Spread) String() string {
	if sp.Requests == 0 {
		return fmt.Sprintf("no requests over %d accounts", sp.Accounts)
	}
	return fmt.Sprintf("busiest account %d requests (%.2f%%; even %.2f%%), busiest 1%% (%d of %d accounts) %.2f%% of requests (even %.2f%%), Gini %.2f, %d of %d accounts used",
		sp.Busiest, 100*sp.BusiestShare, 100/float64(sp.Accounts), sp.Top1Accounts, sp.Accounts, 100*sp.Top1Share, 100*sp.Top1Even, sp.Gini, sp.Serving, sp.Accounts)
}
