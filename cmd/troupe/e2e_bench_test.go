package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	cmd.SetArgs([]string{"bench", "--scenario", "smoke", "--out", out, "--troupe-bin", os.Args[0]})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("troupe bench: %v\n%s", err, stderr.String())
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
