package harness

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/hist"
	"github.com/troupe-gw/troupe/bench/load"
	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/bench/report"
	"github.com/troupe-gw/troupe/bench/scenario"
)

func TestAddedSubtractsTheBaselinePerQuantile(t *testing.T) {
	d := &report.Run{Latency: hist.Summary{P50us: 1000, P90us: 1500, P99us: 3000, P999us: 9000}, TTFT: hist.Summary{P50us: 500, P90us: 700, P99us: 900}}
	g := &report.Run{Latency: hist.Summary{P50us: 1040, P90us: 1580, P99us: 3300, P999us: 8000}, TTFT: hist.Summary{P50us: 530, P90us: 760, P99us: 1900}}
	got := added(d, g, true)
	want := map[string]float64{"p50_us": 40, "p90_us": 80, "p99_us": 300, "p99_9_us": -1000, "ttft_p50_us": 30, "ttft_p90_us": 60, "ttft_p99_us": 1000}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, ok := added(d, g, false)["ttft_p99_us"]; ok {
		t.Error("TTFT subtracted for a non-stream phase")
	}
}

func TestFinishPhaseTakesMedianAndSpreadOverRounds(t *testing.T) {
	rp := report.Phase{Name: "p", Rounds: []report.Round{
		{Added: map[string]float64{"p99_us": 300}},
		{Added: map[string]float64{"p99_us": 100}},
		{Added: map[string]float64{"p99_us": 200}},
		{Added: map[string]float64{"p99_us": 900}},
	}}
	finishPhase(&rp, map[string]*pool{})
	s := rp.Added["p99_us"]
	if s.Median != 250 || s.Min != 100 || s.Max != 900 || len(s.Values) != 4 {
		t.Fatalf("spread %+v, want median 250 (mean of the middle two), min 100, max 900", s)
	}
}

// TestRunAgainstTheMock runs a small scenario with the mock fleet as both
// the "gateway" and the direct baseline: every figure is filled, the rounds
// alternate, and the added latency is small.
func TestRunAgainstTheMock(t *testing.T) {
	s, err := scenario.Parse([]byte(`
name: inproc
accounts: 4
mock: {latency: 2ms}
rounds: 2
phases:
  - {name: chat, api: chat, mode: open, rate: 200, duration: 500ms, warmup: 100ms}
  - {name: stream, api: responses, stream: true, mode: open, rate: 100, duration: 500ms}
  - {name: max, api: chat, mode: closed, concurrency: 4, duration: 300ms}
`))
	if err != nil {
		t.Fatal(err)
	}
	f := mock.New(mock.Config{Accounts: s.MockAccounts()})
	addr, err := f.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var keys []string
	for _, a := range s.MockAccounts() {
		keys = append(keys, a.Token)
	}
	base := "http://" + addr + "/v1"
	var progress strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := Run(ctx, Config{
		Scenario: s,
		Gateway:  load.Target{Name: "gateway", BaseURL: base, Keys: keys},
		Direct:   &load.Target{Name: "direct", BaseURL: base, Keys: keys},
		Mode:     "target", WebSocket: report.WebSocket{Reason: "test"},
		Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Phases) != 3 {
		t.Fatalf("%d phases", len(rep.Phases))
	}
	lines := strings.Split(strings.TrimSpace(progress.String()), "\n")
	if len(lines) != 12 || !strings.Contains(lines[0], "round 1 direct") || !strings.Contains(lines[2], "round 2 gateway") {
		t.Fatalf("runs not interleaved:\n%s", progress.String())
	}
	chat := rep.Phases[0]
	if chat.Direct.OK != 200 || chat.Gateway.OK != 200 || chat.Gateway.Errors != 0 {
		t.Fatalf("chat: direct %+v gateway %+v", chat.Direct, chat.Gateway)
	}
	if len(chat.Rounds) != 2 || chat.Rounds[0].Added == nil || len(chat.CDF["gateway"]) != len(hist.Grid) {
		t.Fatalf("chat rounds/cdf: %+v", chat)
	}
	if _, ok := rep.Phases[1].Added["ttft_p99_us"]; !ok {
		t.Fatal("no added TTFT for the stream phase")
	}
	sm := rep.Summary
	if sm.HeadlinePhase != "chat" || sm.StreamPhase != "stream" || sm.ThroughputPhase != "max" || sm.GatewayRPS <= 0 || sm.DirectRPS <= 0 {
		t.Fatalf("summary %+v", sm)
	}
	// The headline "added" figure is the median over the chat phase's rounds
	// of gateway minus direct (the arithmetic is TestAdded…'s; its size is
	// timing, which a test on a shared machine does not judge).
	var perRound []float64
	for _, r := range chat.Rounds {
		perRound = append(perRound, r.Added["p50_us"])
	}
	if want := report.SpreadOf(perRound).Median; sm.AddedP50us != want || math.IsNaN(sm.AddedP50us) {
		t.Fatalf("added p50 %v µs, want the median of the rounds' %v", sm.AddedP50us, perRound)
	}
	if len(sm.Missing) == 0 || !strings.Contains(strings.Join(sm.Missing, ";"), "CPU") {
		t.Fatalf("missing CPU (no pid) not reported: %v", sm.Missing)
	}
}

func TestSumCounter(t *testing.T) {
	text := `# HELP troupe_upstream_attempts_total x
# TYPE troupe_upstream_attempts_total counter
troupe_upstream_attempts_total{class="ok",provider="openai"} 12
troupe_upstream_attempts_total{class="transient",provider="openai"} 30
# TYPE other counter
other 5
`
	got, err := sumMetric(strings.NewReader(text), "troupe_upstream_attempts_total")
	if err != nil || got != 42 {
		t.Fatalf("%v, %v; want 42", got, err)
	}
}

// The progress bar counts every run: rounds × targets per phase (one
// target for a gateway_only phase or without a baseline), one per hold
// phase, one per failover k.
func TestRunSteps(t *testing.T) {
	s := &scenario.Scenario{Rounds: 3, Phases: []scenario.Phase{
		{Mode: scenario.Open}, {Mode: scenario.Closed, GatewayOnly: true}, {Mode: scenario.Hold},
	}, Failover: &scenario.Failover{Ks: []int{0, 1, 2}}}
	if n := runSteps(Config{Scenario: s, Direct: &load.Target{}}); n != 6+3+1+3 {
		t.Errorf("with a baseline: %d steps, want 13", n)
	}
	if n := runSteps(Config{Scenario: s}); n != 3+3+1+3 {
		t.Errorf("without a baseline: %d steps, want 10", n)
	}
}
