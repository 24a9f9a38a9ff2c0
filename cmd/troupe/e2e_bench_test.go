package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/bench/scenario"
	"github.com/troupe-gw/troupe/bench/scenarios"
	"go.yaml.in/yaml/v3"
)

// benchChildVar, when set to 1, makes this test binary act as the troupe
// binary: TestBenchSmoke starts it as `troupe mock` and `troupe serve`.
// (The name has no TROUPE_ prefix: troupe bench strips those from its
// children's environment.)
const benchChildVar = "BENCH_AS_TROUPE"

func init() {
	if os.Getenv(benchChildVar) == "1" {
		if err := rootCmd().Execute(); err != nil {
			os.Stderr.WriteString("troupe: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// TestBenchSmoke runs `troupe bench --scenario smoke`: the mock fleet and the
// gateway as separate processes on 127.0.0.1, every phase against both, a
// hold and the failover measurement; then checks report.json.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and drives load for about 40 s")
	}
	t.Setenv(benchChildVar, "1")
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := rootCmd()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	mockAddr, gwAddr := mustFreeAddr(t), mustFreeAddr(t) // pinned, as --mock-listen and --gateway-listen do
	cmd.SetArgs([]string{"bench", "--scenario", "smoke", "--out", out, "--troupe-bin", os.Args[0], "--mock-listen", mockAddr, "--gateway-listen", gwAddr})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("troupe bench: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "bench: mock fleet on "+mockAddr+" ") || !strings.Contains(stderr.String(), "bench: gateway on "+gwAddr+" ") {
		t.Errorf("the mock and the gateway not on --mock-listen %s and --gateway-listen %s:\n%s", mockAddr, gwAddr, stderr.String())
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Summary  map[string]any      `json:"summary"`
		Mode     string              `json:"mode"`
		Machine  struct{ CPUs int }  `json:"machine"`
		Versions struct{ Go string } `json:"versions"`
		Phases   []struct {
			Name    string
			Rounds  []struct{ Added map[string]float64 }
			Gateway struct{ OK, Errors int64 }
			Direct  struct{ OK, Errors int64 }
		} `json:"phases"`
		Holds    []struct{ Streams, Open int }
		Failover []struct {
			K                  int
			AttemptsPerRequest float64 `json:"attempts_per_request"`
			Errors             map[string]int64
			TTFT               struct{ Count int64 }
		}
		Memory struct {
			RSSAfterLoad int64 `json:"rss_after_load_bytes"`
		}
		WebSocket struct{ Measured bool } `json:"websocket"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"added_p50_us", "added_p99_us", "gateway_rps", "direct_rps", "gateway_cpu_us_per_request"} {
		if _, ok := rep.Summary[k].(float64); !ok {
			t.Errorf("summary.%s = %v (%T), want a number", k, rep.Summary[k], rep.Summary[k])
		}
	}
	for _, k := range []string{"gateway_rps", "direct_rps", "gateway_cpu_us_per_request"} {
		if v, _ := rep.Summary[k].(float64); v <= 0 {
			t.Errorf("summary.%s = %v, want > 0", k, v)
		}
	}
	if rep.Mode != "self" || rep.Machine.CPUs < 1 || rep.Versions.Go == "" || rep.Memory.RSSAfterLoad <= 0 {
		t.Errorf("mode %q, machine %+v, versions %+v, memory %+v", rep.Mode, rep.Machine, rep.Versions, rep.Memory)
	}
	if len(rep.Phases) != 6 {
		t.Fatalf("%d phases, want 6", len(rep.Phases))
	}
	for _, p := range rep.Phases {
		if len(p.Rounds) != 2 || p.Rounds[0].Added == nil || p.Gateway.OK == 0 || p.Direct.OK == 0 {
			t.Errorf("phase %s: %+v", p.Name, p)
		}
		if p.Gateway.Errors != 0 || p.Direct.Errors != 0 {
			t.Errorf("phase %s: %d gateway and %d direct errors", p.Name, p.Gateway.Errors, p.Direct.Errors)
		}
	}
	if !rep.WebSocket.Measured {
		t.Errorf("the Responses WebSocket phase did not run")
	}
	if len(rep.Holds) != 1 || rep.Holds[0].Open != rep.Holds[0].Streams {
		t.Errorf("holds %+v", rep.Holds)
	}
	if len(rep.Failover) != 3 {
		t.Fatalf("failover %+v", rep.Failover)
	}
	for _, f := range rep.Failover {
		// The method forces exactly k failures: the gateway's own attempt
		// counter must say k + 1 per request.
		if f.AttemptsPerRequest != float64(f.K+1) || len(f.Errors) != 0 || f.TTFT.Count != 20 {
			t.Errorf("failover k=%d: %+v", f.K, f)
		}
	}
	if !strings.Contains(stdout.String(), "verdict:\n  chat-open (100 req/s): the gateway adds p50 ") {
		t.Errorf("no verdict on stdout:\n%s", stdout.String())
	}
	if page, err := os.ReadFile(filepath.Join(out, "report.html")); err != nil || !bytes.Contains(page, []byte("uPlot")) || !bytes.Contains(page, []byte("<h2>Verdict</h2>")) {
		t.Errorf("report.html: %v (or no verdict)", err)
	}
}

// TestBenchPeers runs the peers scenario the way docs/bench.md's side by side
// does, on a shrunken copy (few accounts, low rates, short phases): one mock
// fleet, Troupe started by troupe bench in front of it (--mock without
// --target), then a --target run against a stand-in peer (the mock fleet
// itself, with one account's key, as a peer is configured). Both reports
// must have the peers' four phases measured against the same baseline.
func TestBenchPeers(t *testing.T) {
	t.Setenv(benchChildVar, "1")
	src, err := scenarios.Source("peers")
	if err != nil {
		t.Fatal(err)
	}
	s, err := scenario.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	// Shrink the scale, keep the phases' kinds and order.
	s.Accounts, s.Rounds = 20, 1
	rate, dur := 50.0, 300*time.Millisecond
	if !testing.Short() {
		s.Rounds, rate, dur = 2, 200, time.Second
	}
	for i := range s.Phases {
		p := &s.Phases[i]
		p.Duration, p.Warmup = dur, 0
		if p.Mode == scenario.Open {
			p.Rate = rate * p.Rate / 1000
		} else {
			p.Concurrency = 4
		}
	}
	dir := t.TempDir()
	scenPath := filepath.Join(dir, "peers-small.yaml")
	b, err := yaml.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(scenPath, b, 0o644); err != nil {
		t.Fatal(err)
	}

	fleet := mock.New(mock.Config{Accounts: s.MockAccounts()})
	addr, err := fleet.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	mockURL := "http://" + addr + "/v1"

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	run := func(out string, args ...string) map[string]any {
		t.Helper()
		cmd := rootCmd()
		var stdout, stderr bytes.Buffer
		cmd.SetOut(&stdout)
		cmd.SetErr(&stderr)
		cmd.SetArgs(append([]string{"bench", "--scenario", scenPath, "--out", out}, args...))
		if err := cmd.ExecuteContext(ctx); err != nil {
			t.Fatalf("troupe bench %v: %v\n%s", args, err, stderr.String())
		}
		b, err := os.ReadFile(filepath.Join(out, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		var rep map[string]any
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	self := run(filepath.Join(dir, "troupe"), "--mock", mockURL, "--troupe-bin", os.Args[0])
	peer := run(filepath.Join(dir, "peer"), "--target", mockURL, "--key", s.MockAccounts()[0].Token, "--mock", mockURL)

	for name, rep := range map[string]map[string]any{"troupe": self, "peer": peer} {
		phases, _ := rep["phases"].([]any)
		if len(phases) != len(s.Phases) {
			t.Fatalf("%s: %d phases, want %d", name, len(phases), len(s.Phases))
		}
		for i, p := range phases {
			p := p.(map[string]any)
			if p["name"] != s.Phases[i].Name {
				t.Errorf("%s: phase %d is %v, want %s", name, i, p["name"], s.Phases[i].Name)
			}
			for _, side := range []string{"direct", "gateway"} {
				r, _ := p[side].(map[string]any)
				if ok, _ := r["ok"].(float64); ok <= 0 || r["errors"].(float64) != 0 {
					t.Errorf("%s: phase %v %s: ok %v errors %v", name, p["name"], side, r["ok"], r["errors"])
				}
			}
		}
		sum := rep["summary"].(map[string]any)
		for _, k := range []string{"added_p50_us", "added_p99_us", "added_ttft_p99_us", "throughput_ratio"} {
			if _, ok := sum[k].(float64); !ok {
				t.Errorf("%s: summary.%s = %v, want a number", name, k, sum[k])
			}
		}
	}
	if self["mode"] != "self" || peer["mode"] != "target" {
		t.Errorf("modes %v and %v, want self and target", self["mode"], peer["mode"])
	}
	if cpu, _ := self["summary"].(map[string]any)["gateway_cpu_us_per_request"].(float64); cpu <= 0 {
		t.Errorf("troupe run: gateway CPU per request %v, want > 0", cpu)
	}
	if notes := fmt.Sprint(self["notes"]); !strings.Contains(notes, "--mock: the gateway points at a mock fleet this run did not start") {
		t.Errorf("troupe run's notes do not say the mock was not its own: %s", notes)
	}

	// A --mock that does not serve the scenario's fleet is refused before
	// any load is sent.
	other := mock.New(mock.Config{Accounts: []mock.Account{{Name: "x", Kind: mock.KindOpenAI, Token: "x-token", Models: []string{s.Model}}}})
	otherAddr, err := other.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	cmd := rootCmd()
	var stderr bytes.Buffer
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"bench", "--scenario", scenPath, "--out", filepath.Join(dir, "bad"), "--mock", "http://" + otherAddr + "/v1", "--troupe-bin", os.Args[0]})
	if err := cmd.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "is it `troupe mock --scenario peers`?") {
		t.Errorf("a mock of another fleet: %v, want the refusal naming the scenario", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad", "report.json")); err == nil {
		t.Errorf("a report was written for a refused --mock")
	}
}
