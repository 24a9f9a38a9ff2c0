package scenario

import (
	"fmt"

	"github.com/troupe-gw/troupe/bench/mock"
)

// Member is one account of a scenario's fleet: the mock account, and the
// routing group the gateway's pool puts it in.
type Member struct {
	Account mock.Account
	// Group is "" for the default group, FailoverGroup(k) for the accounts
	// of the failover measurement.
	Group string
	// Healthy is false for accounts given a fault: direct baselines use
	// healthy accounts only.
	Healthy bool
	// Priority is the pool priority: 1 for the failing accounts of the
	// failover groups (FailoverPolicy tries them first), else 0.
	Priority int
}

// FailoverGroup is the routing group of request i (from 0) of the failover
// measurement for k failed attempts: "failover-K-I".
func FailoverGroup(k, i int) string { return fmt.Sprintf("failover-%d-%d", k, i) }

// Fleet returns every account of s, in a fixed order: the default group's
// accounts bench-00001 … (tokens bench-token-bench-00001 …, kind openai, serving
// s.Model, with s.Mock's timing and a fault on s.Mock.FaultRate of them),
// then, when s has hold phases, the HoldGroup accounts hold-00001 … with
// s.HoldProfile's timing, then, when s.Failover is set, for every k the group FailoverGroup(k):
// k × Requests accounts that answer 500 at once (fo-K-00001 …) and one
// healthy account (fo-K-ok). The same scenario always gives the same fleet.
func (s *Scenario) Fleet() []Member {
	fa := make([]mock.Account, s.Accounts)
	for i := range fa {
		fa[i] = s.account(fmt.Sprintf("bench-%05d", i+1))
	}
	if s.Mock.FaultRate > 0 {
		kinds, _ := s.faultKinds() // validated
		mock.AssignFaults(fa, s.Mock.FaultRate, kinds, s.Mock.FaultSeed)
		for i := range fa {
			if f := fa[i].Fault; f != nil && f.Kind == mock.FaultSlowFirstToken {
				f.Delay = s.Mock.SlowFirstToken
			}
		}
	}
	out := make([]Member, 0, len(fa))
	for _, a := range fa {
		out = append(out, Member{Account: a, Healthy: a.Fault == nil})
	}
	if s.HasHold() {
		h := s.HoldProfile
		for i := range h.Accounts {
			a := s.account(fmt.Sprintf("hold-%05d", i+1))
			a.Latency, a.TokensPerSecond, a.OutputTokens = h.Latency, h.TokensPerSecond, h.OutputTokens
			out = append(out, Member{Account: a, Group: HoldGroup, Healthy: true})
		}
	}
	if f := s.Failover; f != nil {
		for _, k := range f.Ks {
			for i := range f.Requests {
				g := FailoverGroup(k, i)
				for j := range k {
					a := s.account(fmt.Sprintf("fo-%d-%05d-%d", k, i+1, j+1))
					a.Fault = &mock.Fault{Kind: mock.FaultServerError}
					out = append(out, Member{Account: a, Group: g, Priority: 1})
				}
				out = append(out, Member{Account: s.account(fmt.Sprintf("fo-%d-%05d-ok", k, i+1)), Group: g, Healthy: true})
			}
		}
	}
	return out
}

// MockAccounts returns the mock side of Fleet.
func (s *Scenario) MockAccounts() []mock.Account {
	ms := s.Fleet()
	out := make([]mock.Account, len(ms))
	for i, m := range ms {
		out[i] = m.Account
	}
	return out
}

func (s *Scenario) account(name string) mock.Account {
	return mock.Account{
		Name:            name,
		Kind:            mock.KindOpenAI,
		Token:           "bench-token-" + name,
		Models:          []string{s.Model},
		Latency:         s.Mock.Latency,
		TokensPerSecond: s.Mock.TokensPerSecond,
		OutputTokens:    s.Mock.OutputTokens,
	}
}

func (s *Scenario) faultKinds() ([]mock.FaultKind, error) {
	var out []mock.FaultKind
	for _, k := range s.Mock.FaultKinds {
		fk, err := mock.ParseFaultKind(k)
		if err != nil {
			return nil, err
		}
		out = append(out, fk)
	}
	return out, nil
}
