package stats

import (
	"strconv"
	"sync"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// series is one account's (or provider's) rings, one per window.
type series struct {
	mu    sync.Mutex
	rings [numWindows][]bucket
}

// bucket is one ring slot: the counts of the attempts in [at, at+step).
type bucket struct {
	at     int64 // bucket number (Unix nanoseconds / step) + 1; 0: empty
	tokens Tokens
	counts tally
}

func newSeries() *series {
	r := &series{}
	for i, w := range Windows {
		r.rings[i] = make([]bucket, w.buckets()+1)
	}
	return r
}

// slot returns ring i's bucket for time at, emptied if it held an older one.
// It returns nil when at is older than the ring reaches (a late record).
func (r *series) slot(i int, at time.Time) *bucket {
	n := at.UnixNano()/int64(Windows[i].step) + 1
	ring := r.rings[i]
	b := &ring[n%int64(len(ring))]
	switch {
	case b.at == n:
	case b.at < n:
		b.at, b.tokens, b.counts = n, Tokens{}, b.counts[:0]
	default:
		return nil
	}
	return b
}

func (r *series) record(at time.Time, a Attempt) {
	st := a.Status
	if st < 0 || st > 999 {
		st = 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.rings {
		b := r.slot(i, at)
		if b == nil {
			continue
		}
		b.counts.add(keyClass+uint32(a.Class), 1)
		b.counts.add(keyStatus+uint32(st), 1)
		if a.Latency > 0 {
			b.counts.add(keyLatency+bin(a.Latency), 1)
		}
		if a.TTFT > 0 {
			b.counts.add(keyTTFT+bin(a.TTFT), 1)
		}
	}
}

func (r *series) addTokens(at time.Time, t Tokens) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.rings {
		if b := r.slot(i, at); b != nil {
			b.tokens.add(t)
		}
	}
}

// merged is a window's buckets added up.
type merged struct {
	counts   [keySpace]uint64
	tokens   Tokens
	requests uint64
	lat, ttf uint64 // values in the latency and TTFT histograms
}

func (m *merged) successRate() float64 {
	if m.requests == 0 {
		return 0
	}
	return float64(m.counts[keyClass+uint32(upstream.ClassNone)]) / float64(m.requests)
}

func (m *merged) latency(q float64) time.Duration {
	return quantile(m.counts[keyLatency:keyLatency+numBins], m.lat, q)
}

func (m *merged) ttft(q float64) time.Duration {
	return quantile(m.counts[keyTTFT:keyTTFT+numBins], m.ttf, q)
}

// index returns the window named by w in Windows.
func index(w Window) int {
	for i := range Windows {
		if Windows[i].Name == w.Name {
			return i
		}
	}
	return len(Windows) - 1
}

// span returns the bucket numbers a window reads as of now: first..last.
func span(w Window, now time.Time) (first, last int64) {
	last = now.UnixNano()/int64(w.step) + 1
	return last - int64(w.buckets()), last
}

// merge adds up r's buckets of window w as of now into m (reset first); r
// may be nil.
func (r *series) merge(w Window, now time.Time, m *merged) {
	*m = merged{}
	if r == nil {
		return
	}
	first, last := span(w, now)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.rings[index(w)] {
		if b.at >= first && b.at <= last {
			b.counts.merge(&m.counts)
			m.tokens.add(b.tokens)
		}
	}
	m.sums()
}

// sums fills the totals from the counts.
func (m *merged) sums() {
	m.requests, m.lat, m.ttf = 0, 0, 0
	for _, c := range m.counts[keyClass:keyStatus] {
		m.requests += c
	}
	for _, c := range m.counts[keyLatency : keyLatency+numBins] {
		m.lat += c
	}
	for _, c := range m.counts[keyTTFT : keyTTFT+numBins] {
		m.ttf += c
	}
}

// Quantiles are a distribution's count and quantiles, in milliseconds.
type Quantiles struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
}

// Summary is one account's or provider's attempts over a window.
type Summary struct {
	Window string `json:"window"`
	// From is the start of the oldest bucket read: the window covers From
	// to the time asked for.
	From        time.Time `json:"from"`
	Requests    uint64    `json:"requests"`     // upstream attempts
	Succeeded   uint64    `json:"succeeded"`    // attempts without a failure class
	SuccessRate float64   `json:"success_rate"` // Succeeded / Requests; 0 without requests
	// Errors counts failed attempts by failure class ("rate", "auth", …;
	// docs/architecture.md "Failure classes").
	Errors map[string]uint64 `json:"errors"`
	// Statuses counts attempts by the upstream's HTTP status ("200",
	// "429", …; "0": no answer, as on a network error).
	Statuses  map[string]uint64 `json:"statuses"`
	LatencyMs Quantiles         `json:"latency_ms"` // lease start to last byte
	TTFTms    Quantiles         `json:"ttft_ms"`    // lease start to first content byte
	Tokens    Tokens            `json:"tokens"`     // of the attempts that served a client
}

func (r *series) summary(w Window, now time.Time) Summary {
	var m merged
	r.merge(w, now, &m)
	first, _ := span(w, now)
	s := Summary{
		Window:      w.Name,
		From:        time.Unix(0, (first-1)*int64(w.step)).UTC(),
		Requests:    m.requests,
		Succeeded:   m.counts[keyClass+uint32(upstream.ClassNone)],
		SuccessRate: m.successRate(),
		Errors:      map[string]uint64{},
		Statuses:    map[string]uint64{},
		LatencyMs:   Quantiles{Count: m.lat, P50: ms(m.latency(.5)), P95: ms(m.latency(.95)), P99: ms(m.latency(.99))},
		TTFTms:      Quantiles{Count: m.ttf, P50: ms(m.ttft(.5)), P95: ms(m.ttft(.95)), P99: ms(m.ttft(.99))},
		Tokens:      m.tokens,
	}
	for c := upstream.Class(1); int(c) < upstream.NumClasses; c++ {
		if n := m.counts[keyClass+uint32(c)]; n > 0 {
			s.Errors[c.String()] = n
		}
	}
	for st := 0; st < keyLatency-keyStatus; st++ {
		if n := m.counts[keyStatus+st]; n > 0 {
			s.Statuses[strconv.Itoa(st)] = n
		}
	}
	return s
}

// Point is one bucket of a window, for charts.
type Point struct {
	At       time.Time `json:"at"` // the bucket's start
	Requests uint64    `json:"requests"`
	Errors   uint64    `json:"errors"` // attempts with a failure class
	P50ms    float64   `json:"latency_p50_ms"`
	P95ms    float64   `json:"latency_p95_ms"`
	TTFTp95  float64   `json:"ttft_p95_ms"`
}

func (r *series) points(w Window, now time.Time) []Point {
	first, last := span(w, now)
	out := make([]Point, 0, last-first+1)
	var m merged
	var ring []bucket
	if r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		ring = r.rings[index(w)]
	}
	for n := first; n <= last; n++ {
		p := Point{At: time.Unix(0, (n-1)*int64(w.step)).UTC()}
		if ring != nil {
			if b := ring[n%int64(len(ring))]; b.at == n {
				m = merged{}
				b.counts.merge(&m.counts)
				m.sums()
				p.Requests = m.requests
				p.Errors = m.requests - m.counts[keyClass+uint32(upstream.ClassNone)]
				p.P50ms, p.P95ms, p.TTFTp95 = ms(m.latency(.5)), ms(m.latency(.95)), ms(m.ttft(.95))
			}
		}
		out = append(out, p)
	}
	return out
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
