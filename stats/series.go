package stats

import (
	"sync"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// series is one account's (or provider's) rings, one per window kept in
// memory (5m, 1h). It is allocated on the account's first attempt; each
// ring's arena grows with the entries its buckets hold and is freed by
// Store.Sweep once the ring's window holds nothing.
type series struct {
	mu    sync.Mutex
	last  int64 // Unix nanoseconds of the newest attempt recorded
	dead  bool  // dropped from the Store (Forget, Sweep): record into a new one
	rings [numRings]ring
}

// ring is one window's buckets: slot n mod len holds bucket n (Unix
// nanoseconds / step + 1) for the len buckets up to head.
type ring struct {
	head int64 // the newest bucket number written; 0: none yet
	t    tally
}

// slots is the number of buckets a window's ring holds.
func (w Window) slots() int64 { return int64(w.buckets() + 1) }

// slot returns ring i's slot for bucket n, emptying the slots of the
// buckets the ring moves past; ok is false when n is older than the ring
// reaches (a late record).
func (r *series) slot(i int, n int64) (slot int, ok bool) {
	g := &r.rings[i]
	l := Windows[i].slots()
	switch {
	case n > g.head:
		if g.head == 0 || n-g.head >= l {
			g.t = g.t[:0]
		} else {
			for b := g.head + 1; b <= n; b++ {
				g.t.clear(int(b % l))
			}
		}
		g.head = n
	case n <= g.head-l:
		return 0, false
	}
	return int(n % l), true
}

// record counts a and, with it, the tokens tk (nil: none; an attempt's
// tokens may also come later, addTokens); it returns false, counting
// nothing, when r was dropped from its Store.
func (r *series) record(at time.Time, a Attempt, tk *Tokens) bool {
	ns := at.UnixNano()
	class := classKey(a.Class)
	st := keyStatus + statusKey(a.Status)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dead {
		return false
	}
	r.last = max(r.last, ns)
	for i := range r.rings {
		sl, ok := r.slot(i, ns/int64(Windows[i].step)+1)
		if !ok {
			continue
		}
		t := &r.rings[i].t
		t.add(sl, keyClass+class, 1)
		t.add(sl, st, 1)
		if a.Latency > 0 {
			t.add(sl, keyLatency+bin(a.Latency), 1)
		}
		if a.TTFT > 0 {
			t.add(sl, keyTTFT+bin(a.TTFT), 1)
		}
		if tk != nil {
			t.addTokens(sl, tk)
		}
	}
	return true
}

// addTokens counts tk; like record, it returns false when r was dropped.
func (r *series) addTokens(at time.Time, tk *Tokens) bool {
	ns := at.UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dead {
		return false
	}
	r.last = max(r.last, ns)
	for i := range r.rings {
		sl, ok := r.slot(i, ns/int64(Windows[i].step)+1)
		if !ok {
			continue
		}
		r.rings[i].t.addTokens(sl, tk)
	}
	return true
}

// addTokens counts tk's positive counts in slot sl.
func (t *tally) addTokens(sl int, tk *Tokens) {
	for k, v := range [tokenKinds]int64{tk.Input, tk.Output, tk.CacheRead, tk.CacheWrite} {
		if v > 0 {
			t.addWide(sl, keyTokens+uint32(k*tokenDigits), uint64(v))
		}
	}
}

// reach returns the buckets of ring i a window as of now reads: lo..hi,
// empty when lo > hi.
func (r *series) reach(i int, now time.Time) (lo, hi int64) {
	first, last := span(Windows[i], now)
	g := &r.rings[i]
	return max(first, g.head-Windows[i].slots()+1), min(last, g.head)
}

// sweep frees the arenas of the rings whose window as of now holds
// nothing (their newest bucket is older than the window's first), when
// they are larger than keepEntries: a quiet account's small arenas stay, so
// its next attempt does not allocate them again. It reports whether every
// ring is empty. A ring freed keeps its head, so a late record still finds
// it behind.
func (r *series) sweep(now time.Time) (empty bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	empty = true
	for i := range r.rings {
		g := &r.rings[i]
		if first, _ := span(Windows[i], now); g.head < first {
			if cap(g.t) > keepEntries {
				g.t = nil
			} else {
				g.t = g.t[:0]
			}
		} else {
			empty = false
		}
	}
	return empty
}

// keepEntries is the largest arena an empty ring keeps (64 bytes).
const keepEntries = 16

// merged is a window's buckets added up.
type merged struct {
	counts   [keySpace]uint64
	tokens   [tokenKinds]int64 // from stored rows (addStored) or the digits (digitTokens)
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
	r.add(w, now, &m.counts)
	m.sums()
	m.digitTokens()
}

// add adds r's buckets of window w as of now to counts; r may be nil.
func (r *series) add(w Window, now time.Time, counts *[keySpace]uint64) {
	if r == nil {
		return
	}
	i := index(w)
	l := w.slots()
	r.mu.Lock()
	defer r.mu.Unlock()
	lo, hi := r.reach(i, now)
	t := r.rings[i].t
	if hi-lo+1 >= l {
		t.merge(counts)
		return
	}
	for b := lo; b <= hi; b++ {
		t.slot(int(b % l)).merge(counts)
	}
}

// parts is a provider's series in numShards parts, one a shard of
// accounts (shardOf): an attempt counts into its account's part, so the
// releases of a provider's accounts rarely wait for each other's; a read
// adds the parts up.
type parts [numShards]struct {
	series
	_ [64]byte // a part's mutex and its neighbour's on distinct cache lines
}

// merge adds up the parts' buckets of window w as of now into m (reset
// first); ps may be nil.
func (ps *parts) merge(w Window, now time.Time, m *merged) {
	*m = merged{}
	if ps != nil {
		for i := range ps {
			ps[i].add(w, now, &m.counts)
		}
	}
	m.sums()
	m.digitTokens()
}

// digitTokens fills the tokens from the in-memory counts' digits.
func (m *merged) digitTokens() {
	for k := range m.tokens {
		m.tokens[k] = 0
		for d := tokenDigits - 1; d >= 0; d-- {
			m.tokens[k] = m.tokens[k]<<countBits + int64(m.counts[keyTokens+k*tokenDigits+d])
		}
	}
}

// addStored adds a stored row's count of key (pending.go "Stored keys").
func (m *merged) addStored(key int, n int64) {
	switch {
	case key >= storedTokens && key < storedTokens+tokenKinds:
		m.tokens[key-storedTokens] += n
	case key >= 0 && key < keyTokens, key >= keyLatency && key < keySpace:
		m.counts[key] += uint64(max(n, 0))
	}
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

func (m *merged) summary(w Window, now time.Time) Summary {
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
		Tokens:      Tokens{Input: m.tokens[0], Output: m.tokens[1], CacheRead: m.tokens[2], CacheWrite: m.tokens[3]},
	}
	for c := upstream.Class(1); int(c) < upstream.NumClasses; c++ {
		if n := m.counts[keyClass+uint32(c)]; n > 0 {
			s.Errors[c.String()] = n
		}
	}
	for k := 0; k < numStatusKeys; k++ {
		if n := m.counts[keyStatus+k]; n > 0 {
			s.Statuses[statusName(k)] = n
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
	lo, hi := int64(1), int64(0)
	var t tally
	l := w.slots()
	if r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		lo, hi = r.reach(index(w), now)
		t = r.rings[index(w)].t
	}
	for n := first; n <= last; n++ {
		p := Point{At: time.Unix(0, (n-1)*int64(w.step)).UTC()}
		if n >= lo && n <= hi {
			m = merged{}
			t.slot(int(n % l)).merge(&m.counts)
			m.sums()
			p = m.point(p.At)
		}
		out = append(out, p)
	}
	return out
}

// point is m as the chart point of the bucket starting at at.
func (m *merged) point(at time.Time) Point {
	p := Point{At: at, Requests: m.requests}
	if m.requests > 0 {
		p.Errors = m.requests - m.counts[keyClass+uint32(upstream.ClassNone)]
		p.P50ms, p.P95ms, p.TTFTp95 = ms(m.latency(.5)), ms(m.latency(.95)), ms(m.ttft(.95))
	}
	return p
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
