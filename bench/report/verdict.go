package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// precision is the relative error of a value read back from the harness's
// HDR histograms (three significant digits: 0.1 %).
const precision = 0.001

// minFloorUs is the smallest noise floor, in µs: differences under 1 µs are
// never reported as added latency.
const minFloorUs = 1

// Figure is one added figure of a phase — gateway − direct at one quantile
// of latency, TTFT or service time — judged against its noise floor.
type Figure struct {
	// Key names the figure as in Phase.Added: "p50_us", "ttft_p99_us", …
	Key string `json:"key"`
	// AddedUs is the median over rounds of gateway − direct, in µs; it can
	// be negative on a noisy machine.
	AddedUs float64 `json:"added_us"`
	// FloorUs is the noise floor in µs: the largest of how much the direct
	// baseline's own value at this quantile moved between rounds
	// (maximum − minimum), the histograms' precision on both sides (2 ×
	// 0.1 % of the baseline) and 1 µs. With a single round the baseline's
	// movement is unknown and only the precision counts.
	FloorUs float64 `json:"noise_floor_us"`
	// Noise is true when AddedUs is below FloorUs (a negative AddedUs
	// always is): the gateway's cost at this quantile cannot be told from
	// the machine's noise.
	Noise bool `json:"noise"`
}

// Bound is what a noise figure is within: the floor, or the measured
// difference when that is larger (a gateway measured faster than direct
// by more than the floor). For a figure that is not noise, AddedUs.
func (f Figure) Bound() float64 {
	if !f.Noise {
		return f.AddedUs
	}
	return math.Max(f.FloorUs, math.Abs(f.AddedUs))
}

// Text renders f in milliseconds: "0.12 ms", or "noise (±0.05 ms)" when it
// is below its noise floor.
func (f Figure) Text() string {
	if f.Noise {
		return "noise (±" + ms(f.Bound()) + ")"
	}
	return ms(f.AddedUs)
}

// ms renders a duration given in µs as milliseconds with three significant
// digits at most: "0.0123 ms", "0.45 ms", "12.3 ms", "1234 ms".
func ms(us float64) string {
	v := us / 1000
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0 ms"
	case a < 0.01:
		return fmt.Sprintf("%.4f ms", v)
	case a < 0.1:
		return fmt.Sprintf("%.3f ms", v)
	case a < 10:
		return fmt.Sprintf("%.2f ms", v)
	case a < 100:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.0f ms", v)
}

// Figure judges the added figure key ("p50_us", "ttft_p99_us",
// "service_p50_us", …) of p; ok is false when p has no such figure (no
// baseline, or TTFT of a non-stream phase).
func (p *Phase) Figure(key string) (f Figure, ok bool) {
	s, ok := p.Added[key]
	if !ok {
		return Figure{}, false
	}
	var base []float64
	for _, r := range p.Rounds {
		if r.Direct != nil && r.Gateway != nil {
			base = append(base, quantileOf(r.Direct, key))
		}
	}
	f = Figure{Key: key, AddedUs: s.Median, FloorUs: minFloorUs}
	if len(base) > 0 {
		lo, hi := slices.Min(base), slices.Max(base)
		f.FloorUs = math.Max(f.FloorUs, 2*precision*SpreadOf(base).Median)
		f.FloorUs = math.Max(f.FloorUs, hi-lo)
	}
	f.Noise = f.AddedUs < f.FloorUs
	return f, true
}

// quantileOf reads the figure key's quantile from a run: "p99_us" from its
// latency, "ttft_p99_us" from its TTFT, "service_p99_us" from its service
// time.
func quantileOf(r *Run, key string) float64 {
	h := &r.Latency
	q := key
	if rest, ok := strings.CutPrefix(key, "ttft_"); ok {
		h, q = &r.TTFT, rest
	} else if rest, ok := strings.CutPrefix(key, "service_"); ok {
		h, q = &r.Service, rest
	}
	switch q {
	case "p50_us":
		return h.P50us
	case "p90_us":
		return h.P90us
	case "p99_us":
		return h.P99us
	case "p99_9_us":
		return h.P999us
	}
	return 0
}

// Throughput compares a phase's gateway and direct throughput (medians over
// rounds, requests per second).
type Throughput struct {
	Phase      string  `json:"phase"`
	GatewayRPS float64 `json:"gateway_rps"`
	DirectRPS  float64 `json:"direct_rps"`
	// Ratio is GatewayRPS / DirectRPS.
	Ratio float64 `json:"ratio"`
	// Noise is true when the two differ by less than either side's own
	// spread over rounds (maximum − minimum): no difference can be told.
	Noise bool `json:"noise"`
}

// throughput compares p's two sides; ok is false without both.
func (p *Phase) throughput() (t Throughput, ok bool) {
	if p.Gateway == nil || p.Direct == nil || p.Direct.RPS.Median <= 0 {
		return Throughput{}, false
	}
	g, d := p.Gateway.RPS, p.Direct.RPS
	t = Throughput{Phase: p.Name, GatewayRPS: g.Median, DirectRPS: d.Median, Ratio: g.Median / d.Median}
	t.Noise = math.Abs(g.Median-d.Median) <= math.Max(g.Max-g.Min, d.Max-d.Min)
	return t, true
}

// FailoverCost is what a failed attempt before the first byte costs a
// request: the median over k ≥ 1 of (TTFT p50 after k failed attempts −
// TTFT p50 with none) / k, in µs.
type FailoverCost struct {
	PerAttemptUs float64 `json:"per_attempt_us"`
	// ByK is the TTFT p50 after k failed attempts, in µs, in the order measured.
	ByK []KV `json:"ttft_p50_us_by_k"`
	// DirectUs is the same request's TTFT p50 straight to the mock (0 when
	// not measured).
	DirectUs float64 `json:"direct_ttft_p50_us,omitempty"`
}

// failoverCost reads r's failover measurement; ok is false without k = 0
// and at least one k ≥ 1.
func (r *Report) failoverCost() (c FailoverCost, ok bool) {
	base := -1.0
	for _, f := range r.Failover {
		c.ByK = append(c.ByK, KV{K: f.K, V: f.TTFT.P50us})
		if f.K == 0 {
			base = f.TTFT.P50us
		}
	}
	if r.FailoverDirect != nil {
		c.DirectUs = r.FailoverDirect.P50us
	}
	var per []float64
	for _, f := range r.Failover {
		if f.K > 0 && base >= 0 {
			per = append(per, (f.TTFT.P50us-base)/float64(f.K))
		}
	}
	if len(per) == 0 {
		return c, false
	}
	c.PerAttemptUs = SpreadOf(per).Median
	return c, true
}

// PhaseVerdict is one phase's line of the verdict: the added latency at p50
// and p99 (and TTFT for streams), the gateway's CPU per request and errors.
type PhaseVerdict struct {
	Phase  string `json:"phase"`
	API    string `json:"api"`
	Stream bool   `json:"stream"`
	Mode   string `json:"mode"`
	// Load is "1000 req/s" (open loop) or "64 workers" (closed loop).
	Load string `json:"load"`
	// P50, P99, TTFTP50, TTFTP99 are nil when not measured.
	P50     *Figure `json:"added_p50,omitempty"`
	P99     *Figure `json:"added_p99,omitempty"`
	TTFTP50 *Figure `json:"added_ttft_p50,omitempty"`
	TTFTP99 *Figure `json:"added_ttft_p99,omitempty"`
	// Throughput is set when both sides were measured.
	Throughput *Throughput `json:"throughput,omitempty"`
	// CPUusPerRequest is the median over rounds of gateway CPU per request
	// (0 when not measured).
	CPUusPerRequest float64 `json:"gateway_cpu_us_per_request,omitempty"`
	GatewayErrors   int64   `json:"gateway_errors"`
	GatewayRequests int64   `json:"gateway_requests"`
}

// Verdict is the plain reading of a report that report.html opens with:
// per phase what the gateway adds, judged against the noise floor; the
// headline throughput against direct; CPU per request; memory; failover
// cost; and what was not measured.
type Verdict struct {
	Phases []PhaseVerdict `json:"phases"`
	// Throughput is the summary's throughput phase (closed loop when there
	// is one).
	Throughput *Throughput `json:"throughput,omitempty"`
	// CPUusPerRequest is the summary's (headline phase).
	CPUusPerRequest float64 `json:"gateway_cpu_us_per_request,omitempty"`
	// RSSAfterLoad and RSSMax are the gateway's resident memory, in bytes.
	RSSAfterLoad int64 `json:"gateway_rss_after_load_bytes,omitempty"`
	RSSMax       int64 `json:"gateway_rss_max_bytes,omitempty"`
	// BytesPerStream is the first hold phase's memory per open stream.
	BytesPerStream float64       `json:"gateway_bytes_per_open_stream,omitempty"`
	Failover       *FailoverCost `json:"failover,omitempty"`
	// GatewayErrors of GatewayRequests failed through the gateway, and
	// DirectErrors straight to the mock, over every phase.
	GatewayErrors   int64    `json:"gateway_errors"`
	GatewayRequests int64    `json:"gateway_requests"`
	DirectErrors    int64    `json:"direct_errors"`
	Missing         []string `json:"missing,omitempty"`
}

// Verdict reads r.
func (r *Report) Verdict() Verdict {
	var v Verdict
	for i := range r.Phases {
		p := &r.Phases[i]
		pv := PhaseVerdict{Phase: p.Name, API: p.API, Stream: p.Stream, Mode: p.Mode}
		if p.Mode == "closed" {
			pv.Load = fmt.Sprintf("%d workers", p.Concurrency)
		} else {
			pv.Load = fmt.Sprintf("%g req/s", p.Rate)
		}
		for key, dst := range map[string]**Figure{"p50_us": &pv.P50, "p99_us": &pv.P99, "ttft_p50_us": &pv.TTFTP50, "ttft_p99_us": &pv.TTFTP99} {
			if f, ok := p.Figure(key); ok {
				*dst = &f
			}
		}
		if t, ok := p.throughput(); ok {
			pv.Throughput = &t
			if p.Name == r.Summary.ThroughputPhase {
				v.Throughput = &t
			}
		}
		if p.CPUusPerRequest != nil {
			pv.CPUusPerRequest = p.CPUusPerRequest.Median
		}
		if p.Gateway != nil {
			pv.GatewayErrors, pv.GatewayRequests = p.Gateway.Errors, p.Gateway.OK+p.Gateway.Errors
		}
		v.Phases = append(v.Phases, pv)
	}
	v.CPUusPerRequest = r.Summary.CPUusPerRequest
	if m := r.Memory; m != nil {
		v.RSSAfterLoad, v.RSSMax = m.RSSAfterLoad, m.RSSMax
	}
	if len(r.Holds) > 0 {
		v.BytesPerStream = r.Holds[0].BytesPerStream
	}
	if c, ok := r.failoverCost(); ok {
		v.Failover = &c
	}
	v.GatewayErrors, v.GatewayRequests, v.DirectErrors = r.Summary.GatewayErrors, r.Summary.GatewayRequests, r.Summary.DirectErrors
	v.Missing = r.Summary.Missing
	return v
}

// Lines renders v as plain sentences, headline first.
func (v Verdict) Lines() []string {
	var out []string
	for _, p := range v.Phases {
		if p.P50 == nil && p.TTFTP50 == nil {
			continue
		}
		var parts []string
		if p.P50 != nil {
			parts = append(parts, "p50 "+p.P50.Text(), "p99 "+p.P99.Text())
		}
		if p.TTFTP50 != nil {
			parts = append(parts, "first content p50 "+p.TTFTP50.Text(), "p99 "+p.TTFTP99.Text())
		}
		out = append(out, fmt.Sprintf("%s (%s): the gateway adds %s", p.Phase, p.Load, strings.Join(parts, ", ")))
	}
	if t := v.Throughput; t != nil {
		s := fmt.Sprintf("throughput (%s): gateway %.0f req/s, direct %.0f req/s: %.1f %% of direct", t.Phase, t.GatewayRPS, t.DirectRPS, 100*t.Ratio)
		if t.Noise {
			s += " (the difference is within the rounds' spread: noise)"
		}
		out = append(out, s)
	}
	if v.CPUusPerRequest > 0 {
		out = append(out, fmt.Sprintf("gateway CPU: %.0f µs per request (%.2f CPU-seconds per 1,000 requests)", v.CPUusPerRequest, v.CPUusPerRequest/1000))
	}
	if v.RSSAfterLoad > 0 {
		s := fmt.Sprintf("gateway memory: %.1f MiB after the load, %.1f MiB at most", mib(v.RSSAfterLoad), mib(v.RSSMax))
		if v.BytesPerStream > 0 {
			s += fmt.Sprintf("; %.1f KiB per open stream", v.BytesPerStream/1024)
		}
		out = append(out, s)
	}
	if f := v.Failover; f != nil {
		var ks []string
		for _, kv := range f.ByK {
			ks = append(ks, fmt.Sprintf("k=%d %s", kv.K, ms(kv.V)))
		}
		s := fmt.Sprintf("failover: each failed attempt before the first byte adds %s to the time to first content (p50; %s", ms(f.PerAttemptUs), strings.Join(ks, ", "))
		if f.DirectUs > 0 {
			s += ", direct " + ms(f.DirectUs)
		}
		out = append(out, s+")")
	}
	if v.GatewayErrors > 0 || v.DirectErrors > 0 {
		out = append(out, fmt.Sprintf("errors: %d of %d requests through the gateway, %d straight to the mock", v.GatewayErrors, v.GatewayRequests, v.DirectErrors))
	}
	for _, m := range v.Missing {
		out = append(out, "not measured: "+m)
	}
	return out
}
