package report

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/hist"
)

// round is one round whose direct run had p50/p99 latency d50/d99 and whose
// gateway added a50/a99.
func round(d50, d99, a50, a99 float64) Round {
	return Round{
		Direct:  &Run{Latency: hist.Summary{P50us: d50, P99us: d99}},
		Gateway: &Run{Latency: hist.Summary{P50us: d50 + a50, P99us: d99 + a99}},
		Added:   map[string]float64{"p50_us": a50, "p99_us": a99},
	}
}

// phaseOf builds a phase from rounds, with Added as the harness fills it.
func phaseOf(rounds ...Round) *Phase {
	p := &Phase{Name: "p", Mode: "open", Rate: 1000, Rounds: rounds, Added: map[string]Spread{}}
	by := map[string][]float64{}
	for _, r := range rounds {
		for k, v := range r.Added {
			by[k] = append(by[k], v)
		}
	}
	for k, vs := range by {
		p.Added[k] = SpreadOf(vs)
	}
	return p
}

func TestFigureNoiseFloor(t *testing.T) {
	// The direct p99 moved 300 µs between rounds: an added median of 120 µs
	// is noise; the p50 baseline moved 20 µs: 150 µs added is real.
	p := phaseOf(round(1000, 5000, 150, 100), round(1010, 5300, 140, 120), round(1020, 5100, 160, 200))
	f50, ok := p.Figure("p50_us")
	if !ok || f50.Noise || f50.AddedUs != 150 || f50.FloorUs != 20 {
		t.Errorf("p50: %+v, want 150 µs added over a floor of 20 µs, not noise", f50)
	}
	if got := f50.Text(); got != "0.15 ms" {
		t.Errorf("p50 text %q, want 0.15 ms", got)
	}
	f99, _ := p.Figure("p99_us")
	if !f99.Noise || f99.FloorUs != 300 || f99.AddedUs != 120 {
		t.Errorf("p99: %+v, want noise below a floor of 300 µs", f99)
	}
	if got := f99.Text(); got != "noise (±0.30 ms)" {
		t.Errorf("p99 text %q, want noise (±0.30 ms)", got)
	}
	if _, ok := p.Figure("ttft_p50_us"); ok {
		t.Errorf("a figure the phase does not have was judged")
	}
}

// A negative added median is always noise, never printed as negative added
// latency; when it is larger than the floor, the bound is the difference.
func TestNegativeAddedIsNoise(t *testing.T) {
	p := phaseOf(round(1000, 5000, -40, -900), round(1005, 5010, -60, -700))
	for key, bound := range map[string]float64{"p50_us": 50, "p99_us": 800} {
		f, _ := p.Figure(key)
		if !f.Noise || f.Bound() != bound || strings.Contains(f.Text(), "-") || strings.Contains(f.Text(), "−") {
			t.Errorf("%s: %+v, text %q: want noise within ±%v µs and no minus sign", key, f, f.Text(), bound)
		}
	}
}

// One round tells nothing about the baseline's movement: only the
// histograms' precision (2 × 0.1 %) and the 1 µs minimum set the floor.
func TestSingleRoundFloorIsPrecision(t *testing.T) {
	p := phaseOf(round(50000, 200, 80, 0.5))
	f50, _ := p.Figure("p50_us")
	if f50.FloorUs != 100 || !f50.Noise {
		t.Errorf("p50: %+v, want a floor of 2 × 0.1 %% of 50,000 µs = 100 µs, and 80 µs noise", f50)
	}
	f99, _ := p.Figure("p99_us")
	if f99.FloorUs != 1 || !f99.Noise {
		t.Errorf("p99: %+v, want the 1 µs minimum floor, and 0.5 µs noise", f99)
	}
}

func TestQuantileOfKeys(t *testing.T) {
	r := &Run{Latency: hist.Summary{P50us: 1, P90us: 2, P99us: 3, P999us: 4}, TTFT: hist.Summary{P50us: 5, P99us: 6}, Service: hist.Summary{P50us: 7, P99us: 8}}
	for key, want := range map[string]float64{"p50_us": 1, "p90_us": 2, "p99_us": 3, "p99_9_us": 4, "ttft_p50_us": 5, "ttft_p99_us": 6, "service_p50_us": 7, "service_p99_us": 8} {
		if got := quantileOf(r, key); got != want {
			t.Errorf("%s: %v, want %v", key, got, want)
		}
	}
}

func TestVerdictLines(t *testing.T) {
	closed := Phase{Name: "max", Mode: "closed", Concurrency: 64,
		Direct:          &Pooled{RPS: SpreadOf([]float64{4000, 4100, 4050})},
		Gateway:         &Pooled{RPS: SpreadOf([]float64{3000, 3020, 3010}), OK: 9000, Errors: 3},
		CPUusPerRequest: &Spread{Median: 180}}
	level := *phaseOf(round(1000, 5000, 150, 100), round(1010, 5300, 140, 120), round(1020, 5100, 160, 200))
	level.Name = "chat-1000rps"
	r := &Report{
		Phases: []Phase{level, closed},
		Summary: Summary{ThroughputPhase: "max", CPUusPerRequest: 180, GatewayErrors: 3, GatewayRequests: 9003,
			Missing: []string{"added TTFT (no streamed open-loop phase with a direct baseline)"}},
		Memory:   &Memory{RSSAfterLoad: 60 << 20, RSSMax: 80 << 20},
		Holds:    []Hold{{BytesPerStream: 6144}},
		Failover: []Failover{{K: 0, TTFT: hist.Summary{P50us: 1500}}, {K: 1, TTFT: hist.Summary{P50us: 2000}}, {K: 2, TTFT: hist.Summary{P50us: 2700}}},
	}
	v := r.Verdict()
	if v.Throughput == nil || v.Throughput.Noise || v.Throughput.Phase != "max" {
		t.Fatalf("throughput %+v: want max, 3010 against 4050 req/s, not noise", v.Throughput)
	}
	if v.Failover == nil || v.Failover.PerAttemptUs != 550 {
		t.Fatalf("failover %+v: want the median of 500/1 and 1200/2 = 550 µs per attempt", v.Failover)
	}
	text := strings.Join(v.Lines(), "\n")
	for _, want := range []string{
		"chat-1000rps (1000 req/s): the gateway adds p50 0.15 ms, p99 noise (±0.30 ms)",
		"throughput (max): gateway 3010 req/s, direct 4050 req/s: 74.3 % of direct",
		"gateway CPU: 180 µs per request (0.18 CPU-seconds per 1,000 requests)",
		"gateway memory: 60.0 MiB after the load, 80.0 MiB at most; 6.0 KiB per open stream",
		"failover: each failed attempt before the first byte adds 0.55 ms to the time to first content (p50; k=0 1.50 ms",
		"errors: 3 of 9003 requests through the gateway",
		"not measured: added TTFT",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("verdict lacks %q:\n%s", want, text)
		}
	}
	// Throughput that differs by less than the rounds' spread is noise.
	closed.Gateway.RPS = SpreadOf([]float64{3990, 4080, 4030})
	if tp, _ := closed.throughput(); !tp.Noise {
		t.Errorf("throughput %+v within the spread is not noise", tp)
	}
}

// Percentile curves stop where their samples do (100 samples resolve p99,
// not p99.9), the x axis with the longest of them; every chart gives a
// series name the same colour.
func TestChartsStopWhereSamplesEnd(t *testing.T) {
	small, large := hist.New(), hist.New()
	for i := range 100 {
		small.Record(1000 + 10*timeUnit(i))
	}
	for i := range 20000 {
		large.Record(1000 + timeUnit(i))
	}
	p := Phase{Name: "s", Stream: true,
		Direct:  &Pooled{Latency: small.Summarize(), TTFT: small.Summarize()},
		Gateway: &Pooled{Latency: small.Summarize(), TTFT: small.Summarize()},
		CDF:     map[string][]hist.Point{"direct": small.Curve(), "gateway": small.Curve(), "direct TTFT": small.Curve(), "gateway TTFT": small.Curve()}}
	r := &Report{Phases: []Phase{p}, Failover: []Failover{{K: 0, CDF: large.Curve(), TTFT: large.Summarize()}, {K: 1, CDF: small.Curve(), TTFT: small.Summarize()}}}
	cs := r.charts()
	p99 := 0
	for i, q := range hist.Grid {
		if q == 0.99 {
			p99 = i + 1
		}
	}
	c := cs[0]
	if len(c.Data[0]) != p99 {
		t.Errorf("100-sample curves: x axis of %d points, want %d (up to p99)", len(c.Data[0]), p99)
	}
	for i, u := range c.Until {
		if u != p99 {
			t.Errorf("series %s drawn to %d points, want %d", c.Series[i], u, p99)
		}
	}
	fo := cs[len(cs)-1]
	if fo.ID != "failover" || fo.Until[0] <= fo.Until[1] || len(fo.Data[0]) != fo.Until[0] {
		t.Errorf("failover chart: until %v over %d x points: want k=0 (20,000 samples) past k=1 (100), the axis as long as k=0", fo.Until, len(fo.Data[0]))
	}
	style := map[string]string{}
	for _, c := range cs {
		for i, name := range c.Series {
			if prev, ok := style[name]; ok && prev != c.Color[i] {
				t.Errorf("series %s is %s in one chart and %s in another", name, prev, c.Color[i])
			}
			style[name] = c.Color[i]
		}
	}
	if style["direct"] != style["direct TTFT"] || style["direct"] == style["gateway"] || style["k=0"] == style["k=1"] {
		t.Errorf("colours %v: want direct and its TTFT alike, direct and gateway apart, each k its own", style)
	}
}

// timeUnit is i microseconds.
func timeUnit(i int) time.Duration { return time.Duration(i) * time.Microsecond }
