// Package report holds the load-test harness's results and writes them:
// report.json (every figure), report.html (plots drawn with the embedded,
// pinned uPlot chart library) and a text summary.
package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/troupe-gw/troupe/bench/hist"
	"github.com/troupe-gw/troupe/bench/scenario"
)

// Report is everything one `troupe bench` run measured. Latencies are in
// microseconds, rates in requests per second, memory in bytes.
type Report struct {
	// Summary holds the headline figures, as numbers.
	Summary Summary `json:"summary"`
	// Scenario is the scenario as run (defaults filled), ScenarioYAML its
	// source text.
	Scenario     *scenario.Scenario `json:"scenario"`
	ScenarioYAML string             `json:"scenario_yaml"`
	// Mode is "self" (the harness started the mock fleet and the gateway)
	// or "target" (a running gateway given with --target).
	Mode     string   `json:"mode"`
	Target   string   `json:"target"`
	Machine  Machine  `json:"machine"`
	Versions Versions `json:"versions"`
	// StartedAt is RFC 3339; DurationS the whole run's wall time.
	StartedAt string  `json:"started_at"`
	DurationS float64 `json:"duration_s"`
	// Notes say what was not measured and why, and other caveats.
	Notes    []string   `json:"notes"`
	Phases   []Phase    `json:"phases"`
	Holds    []Hold     `json:"holds,omitempty"`
	Failover []Failover `json:"failover,omitempty"`
	// FailoverDirect is the same sequential request straight to a healthy
	// mock account: the floor under the failover figures.
	FailoverDirect *hist.Summary `json:"failover_direct_ttft,omitempty"`
	// Memory is the gateway's resident memory at points of the run.
	Memory *Memory `json:"memory,omitempty"`
	// WebSocket says whether the Responses WebSocket path was measured.
	WebSocket WebSocket `json:"websocket"`
	// Fleet is what a run of several instances (scenario
	// gateway.instances above 1) measured beyond the phases.
	Fleet *Fleet `json:"fleet,omitempty"`
}

// Fleet is a fleet run's own figures (docs/bench.md, the fleet scenario):
// the instances' ownership and remote grants after the phases, then the
// recovery after a kill -9 of the last instance.
type Fleet struct {
	// Instances is the number of `troupe serve` processes; the phases went
	// through the first.
	Instances int `json:"instances"`
	// Owned is each instance's troupe_fleet_owned_accounts after the
	// phases, in start order.
	Owned []int `json:"owned"`
	// Requests is the first instance's troupe_requests_total after the
	// phases (every route and status, warm-ups included), RemoteGrants
	// its troupe_fleet_remote_grants_received_total (leases the other
	// instances' owners granted it) and RemoteShare their ratio (0..1).
	Requests     float64 `json:"requests"`
	RemoteGrants float64 `json:"remote_grants"`
	RemoteShare  float64 `json:"remote_share"`
	// TTLs and HeartbeatS are the instances' fleet.ttl and
	// fleet.heartbeat, in seconds.
	TTLs       float64 `json:"fleet_ttl_s"`
	HeartbeatS float64 `json:"fleet_heartbeat_s"`
	// KilledOwned is the accounts the killed instance owned; RecoveryS the
	// seconds from its kill -9 to the survivors owning every account.
	KilledOwned int     `json:"killed_owned"`
	RecoveryS   float64 `json:"recovery_s"`
	// KillRequests is the requests a closed loop of KillWorkers sent to
	// the first instance from the kill to the recovery, KillErrors those
	// that did not answer 200, by status ("503", or "transport").
	KillWorkers  int            `json:"kill_workers"`
	KillRequests int            `json:"kill_requests"`
	KillErrors   map[string]int `json:"kill_errors"`
}

// Summary is the headline of a report. Fields that could not be measured
// (no baseline, no gateway process) are 0 and listed in Missing.
type Summary struct {
	// HeadlinePhase is the open-loop phase the added_* figures come from:
	// the first one with a direct baseline.
	HeadlinePhase string `json:"headline_phase"`
	// AddedP50us … are the median over rounds of (gateway − direct) at
	// that quantile of the headline phase's latency.
	AddedP50us  float64 `json:"added_p50_us"`
	AddedP90us  float64 `json:"added_p90_us"`
	AddedP99us  float64 `json:"added_p99_us"`
	AddedP999us float64 `json:"added_p99_9_us"`
	// StreamPhase is the first streamed open-loop phase with a baseline;
	// AddedTTFT* are its added time to first content.
	StreamPhase    string  `json:"stream_phase,omitempty"`
	AddedTTFTP50us float64 `json:"added_ttft_p50_us"`
	AddedTTFTP99us float64 `json:"added_ttft_p99_us"`
	// WSPhase is the first open-loop responses_ws phase with a baseline;
	// AddedWS* are its added latency and TTFT.
	WSPhase          string   `json:"ws_phase,omitempty"`
	AddedWSP50us     float64  `json:"added_ws_p50_us"`
	AddedWSP99us     float64  `json:"added_ws_p99_us"`
	AddedWSTTFTP99us float64  `json:"added_ws_ttft_p99_us"`
	ThroughputPhase  string   `json:"throughput_phase,omitempty"`
	GatewayRPS       float64  `json:"gateway_rps"`
	DirectRPS        float64  `json:"direct_rps"`
	ThroughputRatio  float64  `json:"throughput_ratio"`
	CPUusPerRequest  float64  `json:"gateway_cpu_us_per_request"`
	CPUsPer1000      float64  `json:"gateway_cpu_s_per_1000_requests"`
	RSSAfterLoad     int64    `json:"gateway_rss_after_load_bytes"`
	BytesPerStream   float64  `json:"gateway_bytes_per_open_stream"`
	GatewayErrors    int64    `json:"gateway_errors"`
	GatewayRequests  int64    `json:"gateway_requests"`
	DirectErrors     int64    `json:"direct_errors"`
	FailoverP50usByK []KV     `json:"failover_ttft_p50_us_by_k,omitempty"`
	Missing          []string `json:"missing,omitempty"`
}

// KV is one labelled number.
type KV struct {
	K int     `json:"k"`
	V float64 `json:"v"`
}

// Machine describes where the run happened.
type Machine struct {
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpu_model"`
	MemTotalKB int64  `json:"mem_total_kb"`
	Kernel     string `json:"kernel"`
	LoadAvg    string `json:"loadavg_at_start"`
}

// Versions are the versions of what was measured and of the harness.
type Versions struct {
	Troupe string `json:"troupe"`
	Go     string `json:"go"`
	// Target is the Server header of the measured gateway, when it sent one.
	Target string `json:"target_server,omitempty"`
}

// Phase is one phase of the scenario over every round.
type Phase struct {
	Name        string  `json:"name"`
	API         string  `json:"api"`
	Stream      bool    `json:"stream"`
	Mode        string  `json:"mode"`
	Rate        float64 `json:"rate,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
	DurationS   float64 `json:"duration_s"`
	// Rounds are the interleaved runs, in the order they ran.
	Rounds []Round `json:"rounds"`
	// Direct and Gateway pool every round's histograms.
	Direct  *Pooled `json:"direct,omitempty"`
	Gateway *Pooled `json:"gateway,omitempty"`
	// Added is the spread over rounds of gateway − direct, per figure.
	Added map[string]Spread `json:"added,omitempty"`
	// CPUusPerRequest is the spread over rounds of gateway CPU per request.
	CPUusPerRequest *Spread `json:"gateway_cpu_us_per_request,omitempty"`
	// Plots: CDFs of the pooled latency and the last round's timeline.
	CDF      map[string][]hist.Point `json:"cdf,omitempty"`
	Timeline map[string][]float64    `json:"timeline,omitempty"`
}

// Round is one round of a phase: a run against each target.
type Round struct {
	Round   int  `json:"round"`
	Direct  *Run `json:"direct,omitempty"`
	Gateway *Run `json:"gateway,omitempty"`
	// Added is gateway − direct for this round (latency, TTFT and service
	// time quantiles, µs), keyed like "p99_us", "ttft_p99_us" and
	// "service_p99_us".
	Added map[string]float64 `json:"added,omitempty"`
}

// Run is one phase against one target.
type Run struct {
	OK       int64            `json:"ok"`
	Errors   map[string]int64 `json:"errors"`
	RPS      float64          `json:"rps"`
	Latency  hist.Summary     `json:"latency"`
	TTFT     hist.Summary     `json:"ttft"`
	Service  hist.Summary     `json:"service"`
	Lag      *hist.Summary    `json:"schedule_lag,omitempty"`
	Sent     int64            `json:"sent"`
	CPUs     float64          `json:"gateway_cpu_s,omitempty"`
	CPUusReq float64          `json:"gateway_cpu_us_per_request,omitempty"`
	RSS      int64            `json:"gateway_rss_bytes,omitempty"`
}

// Pooled is a target's figures over all rounds of a phase.
type Pooled struct {
	Latency hist.Summary `json:"latency"`
	TTFT    hist.Summary `json:"ttft"`
	RPS     Spread       `json:"rps"`
	OK      int64        `json:"ok"`
	Errors  int64        `json:"errors"`
}

// Spread is the median, minimum and maximum of one figure over rounds.
type Spread struct {
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	Values []float64 `json:"values"`
}

// SpreadOf returns the spread of vs (the median of an even count is the
// mean of the middle two); the zero Spread for none.
func SpreadOf(vs []float64) Spread {
	if len(vs) == 0 {
		return Spread{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Spread{Median: med, Min: s[0], Max: s[len(s)-1], Values: vs}
}

// Hold is a phase of streams held open through the gateway.
type Hold struct {
	Name string `json:"name"`
	// Streams were requested; Open got their response headers and were
	// still open when memory was sampled.
	Streams int `json:"streams"`
	Open    int `json:"open"`
	// RSS before opening the streams and while they were open; both 0
	// when the gateway's memory was not measured (troupe bench --target
	// without --pid): a live process's RSS is never 0.
	RSSBefore int64 `json:"rss_before_bytes"`
	RSSOpen   int64 `json:"rss_open_bytes"`
	// BytesPerStream is (RSSOpen − RSSBefore) / Open.
	BytesPerStream float64          `json:"bytes_per_stream"`
	Errors         map[string]int64 `json:"errors"`
}

// MemoryMeasured reports whether the hold's RSS figures were measured.
func (h Hold) MemoryMeasured() bool { return h.RSSBefore > 0 || h.RSSOpen > 0 }

// Failover is the time to first content after K failed attempts.
type Failover struct {
	K        int              `json:"k"`
	Requests int              `json:"requests"`
	TTFT     hist.Summary     `json:"ttft"`
	Latency  hist.Summary     `json:"latency"`
	Errors   map[string]int64 `json:"errors"`
	// AttemptsPerRequest is read from the gateway's
	// troupe_upstream_attempts_total (0 when unavailable): k + 1 confirms
	// the method.
	AttemptsPerRequest float64      `json:"attempts_per_request"`
	CDF                []hist.Point `json:"cdf"`
}

// Memory is the gateway's resident set size at points of the run.
type Memory struct {
	RSSStart     int64 `json:"rss_start_bytes"`
	RSSMax       int64 `json:"rss_max_seen_bytes"`
	RSSAfterLoad int64 `json:"rss_after_load_bytes"`
}

// WebSocket says whether GET /v1/responses over WebSocket was measured.
type WebSocket struct {
	Measured bool   `json:"measured"`
	Reason   string `json:"reason,omitempty"`
}

// Write writes report.json (with the verdict, Report.Verdict, under
// "verdict") and report.html into dir (created if needed).
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	// The verdict is derived from the figures; it is written for readers
	// of report.json (and ignored when one is read back).
	b, err := json.MarshalIndent(struct {
		*Report
		Verdict Verdict `json:"verdict"`
	}{r, r.Verdict()}, "", "  ")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "report.html"))
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := r.HTML(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
