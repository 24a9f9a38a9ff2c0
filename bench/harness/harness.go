// Package harness runs a scenario (package bench/scenario) against a
// gateway and, for the baseline, directly against the mock fleet behind it:
// every phase runs Rounds times against each, direct and gateway
// interleaved (the order alternates by round, so drift on a shared machine
// hits both alike), and the report (package bench/report) gives the added
// latency per round as well as its median and spread. It also samples the
// gateway process's CPU and memory, holds streams open, and measures the
// failover latency. Starting the processes is the caller's job (troupe
// bench in cmd/troupe); the harness only needs their addresses, keys and
// the gateway's process id.
package harness

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/bench/hist"
	"github.com/troupe-gw/troupe/bench/load"
	"github.com/troupe-gw/troupe/bench/proc"
	"github.com/troupe-gw/troupe/bench/report"
	"github.com/troupe-gw/troupe/bench/scenario"
	"github.com/troupe-gw/troupe/internal/progress"
)

// Config is one harness run.
type Config struct {
	Scenario     *scenario.Scenario
	ScenarioYAML []byte
	// Gateway is the gateway under test (its base URL ends in /v1).
	Gateway load.Target
	// Direct is the mock fleet itself, with the healthy accounts' tokens;
	// nil runs without a baseline (added figures are then missing).
	Direct *load.Target
	// GatewayPID is the gateway's process id on this machine, for CPU and
	// memory; 0 when unknown (those figures are then missing).
	GatewayPID int
	// MetricsURL is the gateway's Prometheus endpoint, read to confirm the
	// attempts of the failover measurement; "" skips that check.
	MetricsURL string
	// HoldKey is an API key restricted to scenario.HoldGroup, for hold
	// phases.
	HoldKey string
	// FailoverKeys are, per k, the API keys restricted to
	// scenario.FailoverGroup(k, i) for every request i; the failover
	// measurement needs them.
	FailoverKeys map[int][]string
	// Mode and TargetDesc go into the report ("self" or "target").
	Mode, TargetDesc string
	Versions         report.Versions
	// WebSocket records whether the Responses WebSocket path was measured.
	WebSocket report.WebSocket
	// Notes are added to the report as they are.
	Notes []string
	// Progress receives one line per run; nil discards. On a terminal a
	// progress bar of the runs (package internal/progress) is drawn under
	// the lines.
	Progress io.Writer
}

// Run runs cfg's scenario and returns the report. It stops early, returning
// what it has and ctx's error, when ctx is done.
func Run(ctx context.Context, cfg Config) (*report.Report, error) {
	started := time.Now()
	s := cfg.Scenario
	lines := cfg.Progress
	if lines == nil {
		lines = io.Discard
	}
	bar := progress.New(lines, runSteps(cfg), "bench "+s.Name)
	defer bar.Finish()
	lines = bar.Writer(lines)
	rep := &report.Report{
		Scenario:     s,
		ScenarioYAML: string(cfg.ScenarioYAML),
		Mode:         cfg.Mode,
		Target:       cfg.TargetDesc,
		Machine:      machine(),
		Versions:     cfg.Versions,
		StartedAt:    started.UTC().Format(time.RFC3339),
		Notes:        cfg.Notes,
		WebSocket:    cfg.WebSocket,
	}
	tg, err := newTargets(cfg)
	if err != nil {
		return nil, err
	}
	defer tg.close()
	mem := &memWatch{pid: cfg.GatewayPID}
	mem.sample()
	if mem.ok {
		rep.Memory = &report.Memory{RSSStart: mem.last}
	}

	for _, p := range s.Phases {
		if ctx.Err() != nil {
			break
		}
		if p.Mode == scenario.Hold {
			bar.Describe("hold " + p.Name)
			h, err := runHold(ctx, cfg, p, mem)
			if err != nil {
				return rep, err
			}
			bar.Add(1)
			fmt.Fprintf(lines, "hold %s: %d/%d streams open, %s\n", p.Name, h.Open, h.Streams, h.MemoryText())
			rep.Holds = append(rep.Holds, h)
			continue
		}
		rep.Phases = append(rep.Phases, runLoadPhase(ctx, cfg, p, tg, mem, lines, bar))
	}
	if f := s.Failover; f != nil && ctx.Err() == nil {
		fo, direct, err := runFailover(ctx, cfg, s, lines, bar)
		rep.Failover, rep.FailoverDirect = fo, direct
		if err != nil {
			return rep, err
		}
	}
	if mem.ok {
		time.Sleep(time.Second) // let finished streams and connections go
		mem.sample()
		rep.Memory.RSSMax, rep.Memory.RSSAfterLoad = mem.max, mem.last
	}
	rep.DurationS = time.Since(started).Seconds()
	rep.Summary = summarize(rep)
	return rep, ctx.Err()
}

// targets are the load clients of a run: the gateway's and, when the
// scenario is also run directly against the mock fleet, the direct ones;
// WebSocket clients only when a phase uses the Responses WebSocket.
type targets struct {
	gw, direct     *load.Client
	wsGW, wsDirect *load.WSClient
}

func newTargets(cfg Config) (*targets, error) {
	t := &targets{}
	var err error
	if t.gw, err = load.NewClient(cfg.Gateway, 16384); err != nil {
		return nil, err
	}
	if cfg.Direct != nil {
		if t.direct, err = load.NewClient(*cfg.Direct, 16384); err != nil {
			return nil, err
		}
	}
	if hasWS(cfg.Scenario) {
		if t.wsGW, err = load.NewWSClient(cfg.Gateway, wsConns); err != nil {
			return nil, err
		}
		if cfg.Direct != nil {
			if t.wsDirect, err = load.NewWSClient(*cfg.Direct, wsConns); err != nil {
				t.wsGW.Close()
				return nil, err
			}
		}
	}
	return t, nil
}

// close closes the WebSocket clients.
func (t *targets) close() {
	if t.wsGW != nil {
		t.wsGW.Close()
	}
	if t.wsDirect != nil {
		t.wsDirect.Close()
	}
}

// runLoadPhase runs the rounds of load phase p, alternating which target
// goes first, and returns the phase's figures pooled over the rounds.
func runLoadPhase(ctx context.Context, cfg Config, p scenario.Phase, tg *targets, mem *memWatch, lines io.Writer, bar *progress.Bar) report.Phase {
	rp := report.Phase{Name: p.Name, API: string(p.API), Stream: p.Stream, Mode: string(p.Mode), Rate: p.Rate, Concurrency: p.Concurrency, DurationS: p.Duration.Seconds()}
	pooled := map[string]*pool{}
	for r := range cfg.Scenario.Rounds {
		round := report.Round{Round: r + 1}
		order := []*load.Client{tg.direct, tg.gw}
		if r%2 == 1 {
			order = []*load.Client{tg.gw, tg.direct}
		}
		var last map[string][]float64
		for _, c := range order {
			if c == nil || (c == tg.direct && p.GatewayOnly) {
				continue
			}
			name := c.Target().Name
			pid := 0
			if c == tg.gw {
				pid = cfg.GatewayPID
			}
			var d doer = c
			if p.API == scenario.ResponsesWS {
				d = tg.wsGW
				if c == tg.direct {
					d = tg.wsDirect
				}
			}
			bar.Describe(fmt.Sprintf("%s round %d/%d %s", p.Name, r+1, cfg.Scenario.Rounds, name))
			run, st := runPhase(ctx, d, cfg.Scenario, p, pid)
			bar.Add(1)
			if c == tg.gw {
				round.Gateway = run
				mem.sample()
			} else {
				round.Direct = run
			}
			if pooled[name] == nil {
				pooled[name] = newPool()
			}
			pooled[name].add(st, run)
			if last == nil {
				last = map[string][]float64{}
			}
			last[name] = st.Timeline
			fmt.Fprintf(lines, "%s round %d %s: %d ok, %d errors, %.0f req/s, p50 %.0f µs, p99 %.0f µs\n",
				p.Name, r+1, name, run.OK, st.ErrorCount(), run.RPS, run.Latency.P50us, run.Latency.P99us)
			if ctx.Err() != nil {
				break
			}
			// Let the run's connections close and the processes settle
			// before the next run.
			time.Sleep(settle)
		}
		if round.Direct != nil && round.Gateway != nil {
			round.Added = added(round.Direct, round.Gateway, p.Stream)
		}
		rp.Rounds = append(rp.Rounds, round)
		rp.Timeline = last
	}
	finishPhase(&rp, pooled)
	return rp
}

// runSteps is the number of steps of cfg's run that its progress bar
// counts: every run of a phase against a target, every hold phase, every k
// of the failover measurement.
func runSteps(cfg Config) int {
	s := cfg.Scenario
	n := 0
	for _, p := range s.Phases {
		switch {
		case p.Mode == scenario.Hold:
			n++
		case cfg.Direct != nil && !p.GatewayOnly:
			n += 2 * s.Rounds
		default:
			n += s.Rounds
		}
	}
	if s.Failover != nil {
		n += len(s.Failover.Ks)
	}
	return n
}

// runPhase runs phase p once against c and returns its figures. pid, when
// not 0, is the gateway process whose CPU time is charged to the phase.
func runPhase(ctx context.Context, c doer, s *scenario.Scenario, p scenario.Phase, pid int) (*report.Run, load.Stats) {
	call := load.Call{API: p.API, Stream: p.Stream, Model: s.Model, Timeout: p.Timeout}
	var before proc.Sample
	cpuOK := false
	if pid != 0 {
		var err error
		before, err = proc.Read(pid)
		cpuOK = err == nil
	}
	// sent counts every request of the run, warm-up included: the CPU
	// time sampled around the run is spent on all of them.
	var sent atomic.Int64
	wrapped := func(start time.Time) load.Result { sent.Add(1); return c.Do(call, start) }
	var rec *load.Recorder
	switch p.Mode {
	case scenario.Open:
		rec = load.Open{Rate: p.Rate, Warmup: p.Warmup, Duration: p.Duration, Wait: p.Timeout}.Run(ctx, wrapped)
	default:
		rec = load.Closed{Concurrency: p.Concurrency, Warmup: p.Warmup, Duration: p.Duration}.Run(ctx, wrapped)
	}
	st := rec.Stats(p.Duration)
	run := &report.Run{
		OK: st.OK, Errors: st.Errors, RPS: st.RPS(),
		Latency: st.Latency.Summarize(), TTFT: st.TTFT.Summarize(), Service: st.Service.Summarize(),
		Sent: sent.Load(),
	}
	if p.Mode == scenario.Open {
		lag := st.Lag.Summarize()
		run.Lag = &lag
	}
	if cpuOK {
		if after, err := proc.Read(pid); err == nil {
			run.CPUs = proc.CPUBetween(before, after)
			if run.Sent > 0 {
				run.CPUusReq = run.CPUs * 1e6 / float64(run.Sent)
			}
			run.RSS = after.RSSBytes
		}
	}
	return run, st
}

// settle is the pause between two runs.
const settle = 500 * time.Millisecond

// wsConns is the connection pool size of WebSocket phases per target:
// Troupe's default limit of WebSocket connections per API key.
const wsConns = 64

// doer is a load client: HTTP (load.Client) or WebSocket (load.WSClient).
type doer interface {
	Do(call load.Call, start time.Time) load.Result
	Target() load.Target
}

func hasWS(s *scenario.Scenario) bool {
	for _, p := range s.Phases {
		if p.API == scenario.ResponsesWS {
			return true
		}
	}
	return false
}

// added returns gateway − direct for one round's latency (and, for
// streams, TTFT) quantiles, in µs.
func added(d, g *report.Run, stream bool) map[string]float64 {
	m := map[string]float64{
		"p50_us":   g.Latency.P50us - d.Latency.P50us,
		"p90_us":   g.Latency.P90us - d.Latency.P90us,
		"p99_us":   g.Latency.P99us - d.Latency.P99us,
		"p99_9_us": g.Latency.P999us - d.Latency.P999us,
		// From the actual send: without the generator's own lateness.
		"service_p50_us": g.Service.P50us - d.Service.P50us,
		"service_p99_us": g.Service.P99us - d.Service.P99us,
	}
	if stream {
		m["ttft_p50_us"] = g.TTFT.P50us - d.TTFT.P50us
		m["ttft_p90_us"] = g.TTFT.P90us - d.TTFT.P90us
		m["ttft_p99_us"] = g.TTFT.P99us - d.TTFT.P99us
	}
	return m
}

// pool accumulates one target's rounds of a phase.
type pool struct {
	latency, ttft *hist.Histogram
	rps           []float64
	cpu           []float64
	ok, errs      int64
}

func newPool() *pool { return &pool{latency: hist.New(), ttft: hist.New()} }

func (p *pool) add(st load.Stats, run *report.Run) {
	p.latency.Merge(st.Latency)
	p.ttft.Merge(st.TTFT)
	p.rps = append(p.rps, run.RPS)
	if run.CPUusReq > 0 {
		p.cpu = append(p.cpu, run.CPUusReq)
	}
	p.ok += st.OK
	p.errs += st.ErrorCount()
}

func (p *pool) pooled() *report.Pooled {
	return &report.Pooled{Latency: p.latency.Summarize(), TTFT: p.ttft.Summarize(), RPS: report.SpreadOf(p.rps), OK: p.ok, Errors: p.errs}
}

// finishPhase fills the pooled figures, the spreads over rounds and the
// plots of rp.
func finishPhase(rp *report.Phase, pooled map[string]*pool) {
	rp.CDF = map[string][]hist.Point{}
	for name, p := range pooled {
		switch name {
		case "direct":
			rp.Direct = p.pooled()
		default:
			rp.Gateway = p.pooled()
			if len(p.cpu) > 0 {
				s := report.SpreadOf(p.cpu)
				rp.CPUusPerRequest = &s
			}
		}
		rp.CDF[name] = p.latency.Curve()
		if rp.Stream {
			rp.CDF[name+" TTFT"] = p.ttft.Curve()
		}
	}
	byKey := map[string][]float64{}
	for _, r := range rp.Rounds {
		for k, v := range r.Added {
			byKey[k] = append(byKey[k], v)
		}
	}
	if len(byKey) > 0 {
		rp.Added = map[string]report.Spread{}
		for k, vs := range byKey {
			rp.Added[k] = report.SpreadOf(vs)
		}
	}
}
