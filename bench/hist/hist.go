// Package hist records latencies in HDR histograms
// (github.com/HdrHistogram/hdrhistogram-go) and reads back the figures the
// load-test harness reports: quantiles, mean, maximum and the cumulative
// distribution. Values are durations, stored in nanoseconds with three
// significant digits (a value is read back within 0.1 %) from 1 ns to 10
// minutes; a value outside that range is clamped to it and counted in
// Clamped.
package hist

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Range of recordable values, in nanoseconds.
const (
	lowest  = int64(time.Nanosecond)
	highest = int64(10 * time.Minute)
	sigfigs = 3
)

// Histogram is an HDR histogram of durations. The zero value is not usable;
// call New. A Histogram is not safe for concurrent use: give each goroutine
// its own and Merge them.
type Histogram struct {
	h       *hdrhistogram.Histogram
	clamped int64
}

// New returns an empty histogram covering 1 ns to 10 minutes at three
// significant digits (a recorded value is within 0.1 % of the true one).
func New() *Histogram {
	return &Histogram{h: hdrhistogram.New(lowest, highest, sigfigs)}
}

// Record adds one duration. Values below 1 ns are recorded as 1 ns and
// values above 10 minutes as 10 minutes; both count in Clamped.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < lowest {
		v = lowest
		h.clamped++
	} else if v > highest {
		v = highest
		h.clamped++
	}
	_ = h.h.RecordValue(v) // in range by construction
}

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	h.h.Merge(o.h)
	h.clamped += o.clamped
}

// Count is the number of recorded values.
func (h *Histogram) Count() int64 { return h.h.TotalCount() }

// Clamped is the number of recorded values that fell outside 1 ns – 10 min.
func (h *Histogram) Clamped() int64 { return h.clamped }

// Quantile returns the value at quantile q (0 ≤ q ≤ 1, e.g. 0.99 for p99):
// the smallest recorded value (within the histogram's precision) that at
// least q of the values do not exceed. An empty histogram returns 0.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.Count() == 0 {
		return 0
	}
	return time.Duration(h.h.ValueAtPercentile(q * 100))
}

// Mean returns the mean of the recorded values; 0 when empty.
func (h *Histogram) Mean() time.Duration {
	if h.Count() == 0 {
		return 0
	}
	return time.Duration(h.h.Mean())
}

// Max returns the largest recorded value (within precision); 0 when empty.
func (h *Histogram) Max() time.Duration {
	if h.Count() == 0 {
		return 0
	}
	return time.Duration(h.h.Max())
}

// Summary is the usual read-out of a histogram, in microseconds.
type Summary struct {
	Count  int64   `json:"count"`
	P50us  float64 `json:"p50_us"`
	P90us  float64 `json:"p90_us"`
	P99us  float64 `json:"p99_us"`
	P999us float64 `json:"p99_9_us"`
	MaxUs  float64 `json:"max_us"`
	MeanUs float64 `json:"mean_us"`
}

// Summarize returns h's count, p50, p90, p99, p99.9, maximum and mean.
func (h *Histogram) Summarize() Summary {
	return Summary{
		Count:  h.Count(),
		P50us:  us(h.Quantile(0.50)),
		P90us:  us(h.Quantile(0.90)),
		P99us:  us(h.Quantile(0.99)),
		P999us: us(h.Quantile(0.999)),
		MaxUs:  us(h.Max()),
		MeanUs: us(h.Mean()),
	}
}

// Point is one step of a cumulative distribution: the fraction Q (0..1) of
// values at or below Us microseconds.
type Point struct {
	Q  float64 `json:"q"`
	Us float64 `json:"us"`
}

// CDF returns the cumulative distribution of h, at most maxPoints points
// (at least 2) spread evenly over the histogram's distinct values, ending
// at the maximum (Q = 1). Empty histograms give nil.
func (h *Histogram) CDF(maxPoints int) []Point {
	if h.Count() == 0 {
		return nil
	}
	bs := h.h.CumulativeDistribution()
	maxPoints = max(maxPoints, 2)
	step := max(1, len(bs)/maxPoints)
	out := make([]Point, 0, min(len(bs), maxPoints)+1)
	total := float64(h.Count())
	for i := 0; i < len(bs); i += step {
		b := bs[i]
		out = append(out, Point{Q: float64(b.Count) / total, Us: us(time.Duration(b.ValueAt))})
	}
	if last := bs[len(bs)-1]; out[len(out)-1].Q < 1 {
		out = append(out, Point{Q: float64(last.Count) / total, Us: us(time.Duration(last.ValueAt))})
	}
	return out
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Grid is the quantile grid of percentile curves: dense towards the tail,
// as latency plots of HDR histograms are usually drawn.
var Grid = []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.925, 0.95, 0.96, 0.97, 0.98, 0.99, 0.995, 0.999, 0.9995, 0.9999, 1}

// Curve returns h's value at every quantile of Grid, in microseconds.
func (h *Histogram) Curve() []Point {
	out := make([]Point, len(Grid))
	for i, q := range Grid {
		out[i] = Point{Q: q, Us: us(h.Quantile(q))}
	}
	return out
}
