// Package scenario reads the load-test harness's scenarios: YAML files (the
// shipped ones are in bench/scenarios/) that say which mock fleet to start,
// how to configure the gateway in front of it, and which load phases to run
// against both. The same scenario drives `troupe mock --scenario FILE` (the
// fleet) and `troupe bench --scenario FILE` (the load), so both sides agree
// on accounts, tokens and faults.
package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	"go.yaml.in/yaml/v3"
)

// Scenario is one benchmark: a fleet, a gateway set-up and load phases.
// Durations are YAML strings in Go syntax ("3s", "250ms").
type Scenario struct {
	// Name identifies the scenario in reports (e.g. "smoke").
	Name string `yaml:"name" json:"name"`
	// Description says what the scenario shows.
	Description string `yaml:"description" json:"description"`
	// Accounts is the number of mock accounts behind the gateway's default
	// group (default 2,000). Failover accounts come on top.
	Accounts int `yaml:"accounts" json:"accounts"`
	// Model is the model every request asks for and every account serves
	// (default gpt-4.1-mini).
	Model string `yaml:"model" json:"model"`
	// Mock is the fleet's timing and fault profile.
	Mock Mock `yaml:"mock" json:"mock"`
	// Gateway is how the harness configures a gateway it starts itself.
	Gateway Gateway `yaml:"gateway" json:"gateway"`
	// Rounds is how many times every phase runs against each target,
	// direct and gateway interleaved (default 3).
	Rounds int `yaml:"rounds" json:"rounds"`
	// Phases are run in order within each round.
	Phases []Phase `yaml:"phases" json:"phases"`
	// HoldProfile is the timing of the accounts that serve hold phases
	// (group HoldGroup): slow streams that stay open.
	HoldProfile HoldProfile `yaml:"hold_profile" json:"hold_profile"`
	// Failover, when set, measures the time to first content after k failed
	// attempts (gateway only, after the rounds).
	Failover *Failover `yaml:"failover" json:"failover,omitempty"`
}

// Mock is the timing and fault profile of every account of the fleet.
type Mock struct {
	// Latency is the time to first token of every answer (default 0).
	Latency time.Duration `yaml:"latency" json:"latency_ns"`
	// TokensPerSecond paces streamed tokens; 0 streams as fast as possible.
	TokensPerSecond float64 `yaml:"tokens_per_second" json:"tokens_per_second"`
	// OutputTokens is the number of tokens of every answer (default 12).
	OutputTokens int `yaml:"output_tokens" json:"output_tokens"`
	// FaultRate is the fraction (0..1) of the default group's accounts that
	// fail; which ones is fixed by FaultSeed.
	FaultRate float64 `yaml:"fault_rate" json:"fault_rate"`
	// FaultKinds is the mix of faults dealt to those accounts (bench/mock
	// FaultKind names); empty means every pre-content kind.
	FaultKinds []string `yaml:"fault_kinds" json:"fault_kinds,omitempty"`
	// FaultSeed chooses the faulty accounts (default 1).
	FaultSeed int64 `yaml:"fault_seed" json:"fault_seed"`
	// SlowFirstToken is the extra wait of slow_first_token faults (default
	// 2 minutes: past any first-token timeout, so they count as failures).
	SlowFirstToken time.Duration `yaml:"slow_first_token" json:"slow_first_token_ns"`
}

// Gateway is the configuration of a gateway the harness starts itself.
type Gateway struct {
	// Policy is the active routing policy (default smart).
	Policy string `yaml:"policy" json:"policy"`
	// MaxConcurrency is every account's in-flight limit (default 64).
	MaxConcurrency int `yaml:"max_concurrency" json:"max_concurrency"`
	// MaxAttempts is gateway.max_attempts (default 3; the failover section
	// raises it to its largest k + 1).
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// FirstTokenTimeout is gateway.first_token_timeout and bounds
	// gateway.nonstream_timeout too (default 5s).
	FirstTokenTimeout time.Duration `yaml:"first_token_timeout" json:"first_token_timeout_ns"`
	// Instances is the number of `troupe serve` processes the harness
	// starts (default 1). Above 1 they run as a fleet (docs/fleet.md:
	// fleet.ownership on one PostgreSQL and Redis, given to troupe bench
	// by --postgres and --redis); the phases go through the first, and
	// the report's fleet section gives the share of remote grants and the
	// recovery time after a kill -9 of the last.
	Instances int `yaml:"instances" json:"instances,omitempty"`
}

// HoldProfile is the fleet behind hold phases: Accounts accounts of the
// routing group HoldGroup whose streams start after Latency and then send a
// token every 1/TokensPerSecond seconds, OutputTokens in all.
type HoldProfile struct {
	// Accounts defaults to enough for the largest hold phase at the
	// gateway's max_concurrency per account (at least 4).
	Accounts        int           `yaml:"accounts" json:"accounts"`
	Latency         time.Duration `yaml:"latency" json:"latency_ns"`
	TokensPerSecond float64       `yaml:"tokens_per_second" json:"tokens_per_second"`
	OutputTokens    int           `yaml:"output_tokens" json:"output_tokens"`
}

// HoldGroup is the routing group of the accounts that serve hold phases.
const HoldGroup = "hold"

// HasHold reports whether s has a hold phase (and so hold accounts).
func (s *Scenario) HasHold() bool {
	for _, p := range s.Phases {
		if p.Mode == Hold {
			return true
		}
	}
	return false
}

// Mode is how a phase sends its requests.
type Mode string

// The phase modes.
const (
	// Open is open-loop load: requests start at a constant Rate whatever
	// the answers do, and latency is measured from each request's intended
	// start (no coordinated omission).
	Open Mode = "open"
	// Closed is closed-loop load: Concurrency workers send back to back;
	// the phase measures maximum throughput.
	Closed Mode = "closed"
	// Hold opens Concurrency streams at once and keeps them open for
	// Duration (gateway only): memory per open stream.
	Hold Mode = "hold"
)

// API is the client endpoint a phase calls.
type API string

// The APIs.
const (
	Chat      API = "chat"      // POST /v1/chat/completions
	Responses API = "responses" // POST /v1/responses
	// ResponsesWS is the Responses API WebSocket mode: GET /v1/responses
	// upgraded, one response.create frame per request on pooled
	// connections (always streamed).
	ResponsesWS API = "responses_ws"
)

// Phase is one kind of load, run against each target in every round.
type Phase struct {
	// Name identifies the phase in the report (e.g. "chat-1000rps").
	Name string `yaml:"name" json:"name"`
	// API is chat, responses or responses_ws.
	API API `yaml:"api" json:"api"`
	// Stream asks for SSE ("stream": true).
	Stream bool `yaml:"stream" json:"stream"`
	// Mode is open, closed or hold.
	Mode Mode `yaml:"mode" json:"mode"`
	// Rate is the arrival rate of an open phase, requests per second.
	Rate float64 `yaml:"rate" json:"rate"`
	// Concurrency is the number of workers of a closed phase, or of
	// streams held open by a hold phase.
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	// Duration is how long the phase measures.
	Duration time.Duration `yaml:"duration" json:"duration_ns"`
	// Warmup is sent before measuring, at the same load, and not counted.
	Warmup time.Duration `yaml:"warmup" json:"warmup_ns"`
	// Timeout bounds one request (default 30s).
	Timeout time.Duration `yaml:"timeout" json:"timeout_ns"`
	// GatewayOnly runs the phase through the gateway alone, with no direct
	// baseline (always so for hold phases).
	GatewayOnly bool `yaml:"gateway_only" json:"gateway_only"`
}

// Failover measures the time to first content after k failed attempts.
type Failover struct {
	// Ks are the numbers of failed attempts to measure (e.g. [0, 1, 2, 3]).
	Ks []int `yaml:"ks" json:"ks"`
	// Requests is the number of requests measured per k (default 200).
	Requests int `yaml:"requests" json:"requests"`
	// Stream asks for streamed answers (default true): first content is
	// the first content event.
	Stream *bool `yaml:"stream" json:"stream,omitempty"`
}

// Streamed reports whether failover requests are streamed (default true).
func (f *Failover) Streamed() bool { return f.Stream == nil || *f.Stream }

// Defaults.
const (
	DefaultAccounts       = 2000
	DefaultModel          = "gpt-4.1-mini"
	DefaultRounds         = 3
	DefaultOutputTokens   = 12
	DefaultMaxConcurrency = 64
	DefaultTimeout        = 30 * time.Second
)

// Load reads and validates the scenario file at path, filling defaults.
func Load(path string) (*Scenario, []byte, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("scenario: %w", err)
	}
	s, err := Parse(src)
	if err != nil {
		return nil, nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	return s, src, nil
}

// Parse decodes a scenario from YAML (unknown keys are errors), fills the
// defaults and validates it.
func Parse(src []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	s.fill()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

func (s *Scenario) fill() {
	if s.Accounts == 0 {
		s.Accounts = DefaultAccounts
	}
	if s.Model == "" {
		s.Model = DefaultModel
	}
	if s.Rounds == 0 {
		s.Rounds = DefaultRounds
	}
	if s.Mock.OutputTokens == 0 {
		s.Mock.OutputTokens = DefaultOutputTokens
	}
	if s.Mock.FaultSeed == 0 {
		s.Mock.FaultSeed = 1
	}
	if s.Mock.SlowFirstToken == 0 {
		s.Mock.SlowFirstToken = 2 * time.Minute
	}
	if s.Gateway.Policy == "" {
		s.Gateway.Policy = "smart"
		if s.Failover != nil {
			s.Gateway.Policy = FailoverPolicyName
		}
	}
	if s.Gateway.MaxConcurrency == 0 {
		s.Gateway.MaxConcurrency = DefaultMaxConcurrency
	}
	if s.Gateway.MaxAttempts == 0 {
		s.Gateway.MaxAttempts = 3
	}
	if s.Gateway.Instances == 0 {
		s.Gateway.Instances = 1
	}
	if s.Gateway.FirstTokenTimeout == 0 {
		s.Gateway.FirstTokenTimeout = 5 * time.Second
	}
	for i := range s.Phases {
		p := &s.Phases[i]
		if p.API == "" {
			p.API = Chat
		}
		if p.API == ResponsesWS {
			p.Stream = true
		}
		if p.Timeout == 0 {
			p.Timeout = DefaultTimeout
		}
		if p.Mode == Hold {
			p.GatewayOnly = true
		}
	}
	if s.HasHold() {
		h := &s.HoldProfile
		most := 0
		for _, p := range s.Phases {
			if p.Mode == Hold {
				most = max(most, p.Concurrency)
			}
		}
		if h.Accounts == 0 {
			h.Accounts = max(4, (most+s.Gateway.MaxConcurrency-1)/s.Gateway.MaxConcurrency+1)
		}
		if h.Latency == 0 {
			h.Latency = 50 * time.Millisecond
		}
		if h.TokensPerSecond == 0 {
			h.TokensPerSecond = 1
		}
		if h.OutputTokens == 0 {
			h.OutputTokens = 600
		}
	}
	if f := s.Failover; f != nil {
		if f.Requests == 0 {
			f.Requests = 200
		}
		for _, k := range f.Ks {
			s.Gateway.MaxAttempts = max(s.Gateway.MaxAttempts, k+1)
		}

	}
}

// Validate reports the first thing wrong with s.
func (s *Scenario) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Name == "" {
		bad("name is required")
	}
	if s.Accounts < 1 || s.Accounts > 1_000_000 {
		bad("accounts must be between 1 and 1,000,000")
	}
	if s.HoldProfile.Accounts < 0 || s.HoldProfile.Accounts > 100_000 {
		bad("hold_profile.accounts must be between 0 and 100,000")
	}
	if s.Rounds < 1 {
		bad("rounds must be at least 1")
	}
	if s.Gateway.Instances < 0 || s.Gateway.Instances > 9 {
		bad("gateway.instances must be between 0 and 9")
	}
	if s.Gateway.Instances > 1 && (s.HasHold() || s.Failover != nil) {
		bad("gateway.instances above 1 measures load phases only (no hold phases, no failover)")
	}
	if s.Mock.Latency < 0 || s.Mock.TokensPerSecond < 0 || s.Mock.OutputTokens < 0 {
		bad("mock latency, tokens_per_second and output_tokens must not be negative")
	}
	if s.Mock.FaultRate < 0 || s.Mock.FaultRate > 1 {
		bad("mock.fault_rate must be between 0 and 1")
	}
	if _, err := s.faultKinds(); err != nil {
		errs = append(errs, err)
	}
	if len(s.Phases) == 0 && s.Failover == nil {
		bad("a scenario needs phases or failover")
	}
	seen := map[string]bool{}
	for i, p := range s.Phases {
		where := fmt.Sprintf("phases[%d] %q", i, p.Name)
		if p.Name == "" {
			bad("phases[%d]: name is required", i)
		} else if seen[p.Name] {
			bad("%s: duplicate name", where)
		}
		seen[p.Name] = true
		if p.API != Chat && p.API != Responses && p.API != ResponsesWS {
			bad("%s: api must be chat, responses or responses_ws", where)
		}
		if p.API == ResponsesWS && p.Mode == Hold {
			bad("%s: hold phases use chat or responses", where)
		}
		if p.Duration <= 0 || p.Warmup < 0 || p.Timeout <= 0 {
			bad("%s: duration must be positive, warmup and timeout not negative", where)
		}
		switch p.Mode {
		case Open:
			if p.Rate <= 0 || p.Rate > 1e6 {
				bad("%s: an open phase needs a rate between 0 and 1,000,000 req/s", where)
			}
		case Closed:
			if p.Concurrency < 1 || p.Concurrency > 100_000 {
				bad("%s: a closed phase needs concurrency ≥ 1", where)
			}
		case Hold:
			if p.Concurrency < 1 || p.Concurrency > 100_000 || !p.Stream {
				bad("%s: a hold phase needs concurrency ≥ 1 and stream: true", where)
			}
		default:
			bad("%s: mode must be open, closed or hold", where)
		}
	}
	if f := s.Failover; f != nil {
		if len(f.Ks) == 0 || f.Requests < 1 || f.Requests > 10_000 {
			bad("failover needs ks and requests between 1 and 10,000")
		}
		if s.Gateway.Policy != FailoverPolicyName {
			bad("failover needs gateway.policy %s (it orders each request's failing accounts first)", FailoverPolicyName)
		}
		for _, k := range f.Ks {
			if k < 0 || k > 8 {
				bad("failover: k must be between 0 and 8")
			}
		}
	}
	return errors.Join(errs...)
}
