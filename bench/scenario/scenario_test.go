package scenario

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
)

func TestDefaults(t *testing.T) {
	s, err := Parse([]byte("name: x\nphases:\n  - {name: a, mode: open, rate: 10, duration: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Accounts != 2000 || s.Model != DefaultModel || s.Rounds != 3 || s.Gateway.Policy != "smart" || s.Gateway.MaxAttempts != 3 ||
		s.Phases[0].API != Chat || s.Phases[0].Timeout != DefaultTimeout || s.Mock.OutputTokens != 12 {
		t.Fatalf("defaults: %+v", s)
	}
}

func TestValidation(t *testing.T) {
	for src, want := range map[string]string{
		"phases: [{name: a, mode: open, rate: 1, duration: 1s}]": "name is required",
		"name: x": "needs phases or failover",
		"name: x\nphases: [{name: a, mode: open, duration: 1s}]":                                                        "rate between",
		"name: x\nphases: [{name: a, mode: closed, duration: 1s}]":                                                      "concurrency",
		"name: x\nphases: [{name: a, mode: hold, concurrency: 3, duration: 1s}]":                                        "stream: true",
		"name: x\nphases: [{name: a, mode: sideways, duration: 1s}]":                                                    "mode must be",
		"name: x\nphases: [{name: a, api: soap, mode: open, rate: 1, duration: 1s}]":                                    "api must be chat, responses or responses_ws",
		"name: x\nphases: [{name: a, mode: open, rate: 1}]":                                                             "duration must be positive",
		"name: x\nmock: {fault_rate: 2}\nfailover: {ks: [1]}":                                                           "fault_rate",
		"name: x\nmock: {fault_kinds: [gremlins]}\nfailover: {ks: [1]}":                                                 "unknown fault kind",
		"name: x\ngateway: {policy: smart}\nfailover: {ks: [1]}":                                                        "bench_failover",
		"name: x\nbogus: 1\nfailover: {ks: [1]}":                                                                        "field bogus not found",
		"name: x\nphases: [{name: a, mode: open, rate: 1, duration: 1s}, {name: a, mode: open, rate: 1, duration: 1s}]": "duplicate",
	} {
		_, err := Parse([]byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one containing %q", src, err, want)
		}
	}
}

func TestFleet(t *testing.T) {
	s, err := Parse([]byte(`
name: x
accounts: 100
mock: {latency: 3ms, tokens_per_second: 10, fault_rate: 0.3, fault_kinds: [server_error, slow_first_token]}
phases: [{name: h, mode: hold, stream: true, concurrency: 200, duration: 1s}]
failover: {ks: [0, 2], requests: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Gateway.Policy != FailoverPolicyName || s.Gateway.MaxAttempts != 3 {
		t.Fatalf("failover scenario gateway %+v", s.Gateway)
	}
	fleet := s.Fleet()
	// 100 default + hold accounts (⌈200 streams / 64 per account⌉ + 1 = 5) + 5×1 + 5×3.
	if want := 100 + 5 + 5 + 15; len(fleet) != want {
		t.Fatalf("%d accounts, want %d", len(fleet), want)
	}
	faulty, tokens := 0, map[string]bool{}
	groups := map[string][]Member{}
	for _, m := range fleet {
		if tokens[m.Account.Token] {
			t.Fatalf("token %s twice", m.Account.Token)
		}
		tokens[m.Account.Token] = true
		groups[m.Group] = append(groups[m.Group], m)
		if m.Group == "" {
			if m.Account.Latency != 3*time.Millisecond || m.Account.TokensPerSecond != 10 {
				t.Fatalf("timing of %+v", m.Account)
			}
			if !m.Healthy {
				faulty++
				if m.Account.Fault.Kind == mock.FaultSlowFirstToken && m.Account.Fault.Delay != 2*time.Minute {
					t.Fatalf("slow first token delay %v", m.Account.Fault.Delay)
				}
			}
		}
	}
	if faulty != 30 {
		t.Fatalf("%d faulty accounts, want 30", faulty)
	}
	if len(groups[HoldGroup]) != 5 || groups[HoldGroup][0].Account.TokensPerSecond != 1 {
		t.Fatalf("hold group %+v", groups[HoldGroup])
	}
	g := groups[FailoverGroup(2, 4)]
	if len(g) != 3 || g[0].Priority != 1 || g[0].Healthy || g[0].Account.Fault.Kind != mock.FaultServerError || !g[2].Healthy || g[2].Priority != 0 {
		t.Fatalf("failover group k=2 i=4: %+v", g)
	}
	// Deterministic.
	again := s.Fleet()
	for i := range fleet {
		if fleet[i].Account.Name != again[i].Account.Name || (fleet[i].Account.Fault == nil) != (again[i].Account.Fault == nil) {
			t.Fatalf("fleet differs at %d", i)
		}
	}
}

// Several instances run load phases only, and default to one.
func TestInstances(t *testing.T) {
	s, err := Parse([]byte("name: x\nphases:\n  - {name: a, api: chat, mode: closed, concurrency: 1, duration: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Gateway.Instances != 1 {
		t.Fatalf("instances %d, want the default 1", s.Gateway.Instances)
	}
	if _, err := Parse([]byte("name: x\ngateway: {instances: 3}\nfailover: {ks: [0]}\n")); err == nil {
		t.Fatal("failover with 3 instances accepted")
	}
	if _, err := Parse([]byte("name: x\ngateway: {instances: 10}\nphases:\n  - {name: a, api: chat, mode: closed, concurrency: 1, duration: 1s}\n")); err == nil {
		t.Fatal("10 instances accepted")
	}
}
