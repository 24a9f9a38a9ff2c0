package storage

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// SeriesQuery asks for the request log of the window [From, To) summed in
// buckets of Step, the first starting at From (RequestLog.UsageSeries).
type SeriesQuery struct {
	From, To time.Time
	Step     time.Duration // whole seconds, at least one; (To−From)/Step at most MaxSeriesBuckets
}

// MaxSeriesBuckets bounds the buckets of a SeriesQuery (a day of minutes).
const MaxSeriesBuckets = 1440

// Buckets returns the number of buckets q spans (the last may be partial).
func (q SeriesQuery) Buckets() int {
	if q.Step <= 0 || !q.From.Before(q.To) {
		return 0
	}
	n := q.To.Sub(q.From) / q.Step
	if q.From.Add(n * q.Step).Before(q.To) {
		n++
	}
	return int(n)
}

// Validate reports whether q can be answered: From before To, Step whole
// seconds, at least one, and at most MaxSeriesBuckets buckets. The error wraps
// ErrInvalid.
func (q SeriesQuery) Validate() error {
	switch {
	case q.From.IsZero() || q.To.IsZero() || !q.From.Before(q.To):
		return fmt.Errorf("%w: series window [%s, %s) is empty", ErrInvalid, q.From.Format(time.RFC3339), q.To.Format(time.RFC3339))
	case q.Step < time.Second || q.Step%time.Second != 0:
		return fmt.Errorf("%w: series step %s is not a whole number of seconds", ErrInvalid, q.Step)
	case q.Buckets() > MaxSeriesBuckets:
		return fmt.Errorf("%w: series of more than %d buckets", ErrInvalid, MaxSeriesBuckets)
	}
	return nil
}

// SeriesBucket is one bucket of a series: what the request log holds of
// [Start, Start+Step).
type SeriesBucket struct {
	Start     time.Time
	Requests  int64 // usage records: client requests, served or failed
	Failed    int64 // of them, those answered with status >= 400
	Failovers int64 // extra upstream attempts: the sum of attempts − 1 over the requests
	// Tokens of the requests (CachedTokens is part of InputTokens).
	InputTokens, CachedTokens, OutputTokens int64
	// Errors counts the failed upstream attempts (error events, failed
	// over or not) by failure class; nil when there were none.
	Errors map[string]int64
	// Latency is the histogram of the requests' latency (start to last
	// byte).
	Latency LatencyHistogram
}

// LatencyHistogram counts latencies in the bins of LatencyBinUpper: bin i
// holds those under LatencyBinUpper[i] and at or above the bin before's
// bound; the last bin holds the rest.
type LatencyHistogram [NumLatencyBins]int64

// NumLatencyBins is the number of bins of a LatencyHistogram.
const NumLatencyBins = 64

// LatencyBinUpper holds the exclusive upper bounds of the latency bins but
// the last (which is open), in microseconds: 1 ms, then 25 % more each,
// rounded, up to about 17 minutes. A quantile read from the histogram is
// off by at most a bin's width (a quarter of its value).
var LatencyBinUpper = func() [NumLatencyBins - 1]int64 {
	var b [NumLatencyBins - 1]int64
	v := 1000.0
	for i := range b {
		b[i] = int64(math.Round(v))
		v *= 1.25
	}
	return b
}()

// LatencyBin returns the bin of LatencyHistogram that latency d falls in.
func LatencyBin(d time.Duration) int {
	us := d.Microseconds()
	lo, hi := 0, len(LatencyBinUpper) // the first bound above us, by bisection
	for lo < hi {
		m := (lo + hi) / 2
		if us < LatencyBinUpper[m] {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// LatencyBinSQL returns a SQL expression of the latency bin (as LatencyBin
// computes it) of the integer column col holding microseconds: a CASE
// nested as a bisection, so a row costs six comparisons. Both backends
// use it in UsageSeries; col must be a column name, not user input.
func LatencyBinSQL(col string) string {
	var b strings.Builder
	var bisect func(lo, hi int) // the bin is in [lo, hi]
	bisect = func(lo, hi int) {
		if lo == hi {
			b.WriteString(strconv.Itoa(lo))
			return
		}
		m := (lo + hi) / 2 // bins lo..m are under LatencyBinUpper[m]
		b.WriteString("CASE WHEN " + col + " < " + strconv.FormatInt(LatencyBinUpper[m], 10) + " THEN ")
		bisect(lo, m)
		b.WriteString(" ELSE ")
		bisect(m+1, hi)
		b.WriteString(" END")
	}
	bisect(0, NumLatencyBins-1)
	return b.String()
}

// Add counts latency d.
func (h *LatencyHistogram) Add(d time.Duration) { h[LatencyBin(d)]++ }

// Count returns the latencies counted.
func (h *LatencyHistogram) Count() int64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return n
}

// Quantile returns the q-quantile (0 < q ≤ 1) of the latencies counted,
// interpolated linearly within its bin, or 0 when none are. The open last
// bin answers its lower bound.
func (h *LatencyHistogram) Quantile(q float64) time.Duration {
	n := h.Count()
	if n == 0 {
		return 0
	}
	rank := q * float64(n) // the rank-th smallest latency, 1-based
	var seen int64
	for i, c := range h {
		if c == 0 || float64(seen+c) < rank {
			seen += c
			continue
		}
		var lo, hi float64
		if i > 0 {
			lo = float64(LatencyBinUpper[i-1])
		}
		if i == len(LatencyBinUpper) {
			return time.Duration(lo) * time.Microsecond
		}
		hi = float64(LatencyBinUpper[i])
		frac := (rank - float64(seen)) / float64(c)
		return time.Duration(lo+frac*(hi-lo)) * time.Microsecond
	}
	return time.Duration(LatencyBinUpper[len(LatencyBinUpper)-1]) * time.Microsecond
}

// NewSeries returns the empty buckets of q, their Start set.
func NewSeries(q SeriesQuery) []SeriesBucket {
	out := make([]SeriesBucket, q.Buckets())
	for i := range out {
		out[i].Start = q.From.Add(time.Duration(i) * q.Step).UTC()
	}
	return out
}

// SeriesOf sums recs and evs into q's buckets as UsageSeries does (those
// outside q's window are left out), for stores that keep the request log in
// memory. q must be valid.
func SeriesOf(q SeriesQuery, recs []UsageRecord, evs []ErrorEvent) []SeriesBucket {
	out := NewSeries(q)
	bucket := func(at time.Time) *SeriesBucket {
		if at.Before(q.From) || !at.Before(q.To) {
			return nil
		}
		return &out[at.Sub(q.From)/q.Step]
	}
	for i := range recs {
		r := &recs[i]
		b := bucket(r.At)
		if b == nil {
			continue
		}
		b.Requests++
		if r.Status >= 400 {
			b.Failed++
		}
		b.Failovers += int64(max(r.Attempts-1, 0))
		b.InputTokens += r.InputTokens
		b.CachedTokens += r.CachedTokens
		b.OutputTokens += r.OutputTokens
		b.Latency.Add(r.Latency)
	}
	for i := range evs {
		if b := bucket(evs[i].At); b != nil {
			if b.Errors == nil {
				b.Errors = map[string]int64{}
			}
			b.Errors[evs[i].Class]++
		}
	}
	return out
}

// Rows is the part of a query's result the series scanners read: both
// *sql.Rows and pgx.Rows have it.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// AddUsageRows adds the rows of a backend's usage aggregate into out: each
// row is (bucket, latency bin, requests, failed, failovers, input tokens,
// cached tokens, output tokens), all integers, bucket and bin counted from 0
// (LatencyBinSQL). Rows outside out or the bins are skipped. The error is the
// scan's or the result's.
func AddUsageRows(out []SeriesBucket, rows Rows) error {
	for rows.Next() {
		var b, bin, n, failed, failovers, in, cached, outTok int64
		if err := rows.Scan(&b, &bin, &n, &failed, &failovers, &in, &cached, &outTok); err != nil {
			return err
		}
		if b < 0 || b >= int64(len(out)) || bin < 0 || bin >= NumLatencyBins {
			continue
		}
		o := &out[b]
		o.Requests += n
		o.Failed += failed
		o.Failovers += failovers
		o.InputTokens += in
		o.CachedTokens += cached
		o.OutputTokens += outTok
		o.Latency[bin] += n
	}
	return rows.Err()
}

// AddErrorRows adds the rows of a backend's error-event aggregate into out:
// each row is (bucket, class, count). Rows outside out are skipped.
func AddErrorRows(out []SeriesBucket, rows Rows) error {
	for rows.Next() {
		var b, n int64
		var class string
		if err := rows.Scan(&b, &class, &n); err != nil {
			return err
		}
		if b < 0 || b >= int64(len(out)) {
			continue
		}
		if out[b].Errors == nil {
			out[b].Errors = map[string]int64{}
		}
		out[b].Errors[class] += n
	}
	return rows.Err()
}
