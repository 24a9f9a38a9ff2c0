// Package stats keeps per-account and per-provider statistics of upstream
// attempts over sliding windows (5m, 1h, 6h, 24h, 7d): attempts, success
// rate, failure classes, HTTP status codes, latency and time-to-first-token
// quantiles, and tokens.
//
// Each account (and each provider) has five rings of time buckets, one per
// window, each ring 12 buckets of a twelfth of its window (the 5-minute
// ring: 5 one-minute buckets) plus the current one. A window is read as its
// complete buckets plus the current partial one, so it spans between its
// length and its length plus one bucket (5m: 5–6 minutes; 1h: 60–65
// minutes; 7d: 7 days to 7 days 14 hours). A ring's counts are one sorted
// slice of packed 4-byte entries (tally.go) — slot, key (failure class,
// status, latency or TTFT bin, token digit) and count — holding only the
// keys a bucket saw. An account's series is allocated on its first attempt,
// a ring whose window is empty is freed by Sweep, and an account idle for
// longer than the 7d window reaches is dropped (Sweep runs every
// SweepEvery of record time, started by Record). docs/benchmarks.md has the
// measured cost at 10,000 accounts.
//
// The gateway records every upstream attempt where it releases the lease
// (gateway.Server.release) and the tokens of the attempt that served the
// client; the admin API reads it (docs/admin-api.md#statistics).
package stats

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// Window is one of the sliding windows statistics are kept over.
type Window struct {
	Name string        // "5m", "1h", "6h", "24h", "7d"
	Span time.Duration // the window's length
	step time.Duration // the ring's bucket width
}

// Windows are the windows kept, shortest first.
var Windows = [numWindows]Window{
	{Name: "5m", Span: 5 * time.Minute, step: time.Minute},
	{Name: "1h", Span: time.Hour, step: 5 * time.Minute},
	{Name: "6h", Span: 6 * time.Hour, step: 30 * time.Minute},
	{Name: "24h", Span: 24 * time.Hour, step: 2 * time.Hour},
	{Name: "7d", Span: 7 * 24 * time.Hour, step: 14 * time.Hour},
}

const numWindows = 5

// Buckets is the number of complete buckets a window reads besides the current one.
func (w Window) buckets() int { return int(w.Span / w.step) }

// Step is the width of the window's buckets: its resolution in time.
func (w Window) Step() time.Duration { return w.step }

// WindowNamed returns the window called name ("5m", "1h", "6h", "24h",
// "7d"); ok is false for any other name.
func WindowNamed(name string) (w Window, ok bool) {
	for _, w := range Windows {
		if w.Name == name {
			return w, true
		}
	}
	return Window{}, false
}

// Attempt is one upstream attempt's outcome.
type Attempt struct {
	Status  int            // HTTP status the upstream answered; 0 when none
	Class   upstream.Class // ClassNone for a success
	Latency time.Duration  // lease start to last byte; 0: not measured
	TTFT    time.Duration  // lease start to first content byte; 0: none
}

// Tokens are token counts.
type Tokens struct {
	Input      int64 `json:"input"`
	Output     int64 `json:"output"`
	CacheRead  int64 `json:"cache_read"`
	CacheWrite int64 `json:"cache_write"`
}

// Store holds the statistics of every account and provider. The zero value
// is not usable; call New. It is safe for concurrent use: a lookup takes a
// read lock on the key map, a record the one key's mutex.
type Store struct {
	mu        sync.RWMutex
	accounts  map[string]*series
	providers map[string]*series
	nextSweep atomic.Int64   // Unix nanoseconds of record time at which Record starts the next Sweep
	sweeps    sync.WaitGroup // the sweeps Record started (tests wait for them)
	since     time.Time
}

// SweepEvery is how often, in the time of the attempts recorded, Record
// starts a Sweep in the background.
const SweepEvery = 10 * time.Minute

// New returns an empty Store, counting from now on.
func New() *Store {
	return &Store{accounts: map[string]*series{}, providers: map[string]*series{}, since: time.Now().UTC().Truncate(time.Second)}
}

// Since is when the Store was made: statistics are kept in memory by each
// instance, from its start, so no window reaches back before it.
func (s *Store) Since() time.Time { return s.since }

// Record counts one attempt of account (its ID) on provider, completed at at.
func (s *Store) Record(at time.Time, account, provider string, a Attempt) {
	if s == nil {
		return
	}
	for !s.get(&s.accounts, account).record(at, a) { // false: Forget or Sweep dropped it just now
	}
	s.get(&s.providers, provider).record(at, a)
	if ns, next := at.UnixNano(), s.nextSweep.Load(); ns >= next && s.nextSweep.CompareAndSwap(next, ns+int64(SweepEvery)) && next != 0 {
		s.sweeps.Go(func() { s.Sweep(at) })
	}
}

// Sweep frees what the statistics no longer need as of now: the rings of
// every series whose window holds nothing (an account idle for an hour
// keeps only its 6h, 24h and 7d rings' entries; an empty ring's arena is
// freed when larger than 64 bytes, kept for reuse when smaller), and the
// accounts with no attempt in any window (idle for longer than the 7d
// window reaches). Record starts it every SweepEvery; it is safe to call at
// any time.
func (s *Store) Sweep(now time.Time) {
	if s == nil {
		return
	}
	// Under the read lock: Records of known accounts go on, and no list of
	// every key is allocated (the lock order, store then series, is
	// Forget's too).
	var idle []string
	s.mu.RLock()
	for _, r := range s.providers {
		r.sweep(now)
	}
	for k, r := range s.accounts {
		if r.sweep(now) {
			idle = append(idle, k)
		}
	}
	s.mu.RUnlock()
	if len(idle) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range idle {
		// An attempt may have come since: keep the account if so.
		if r := s.accounts[k]; r != nil {
			r.mu.Lock()
			if r.last <= now.UnixNano() {
				r.dead = true
				delete(s.accounts, k)
			}
			r.mu.Unlock()
		}
	}
}

// AddTokens counts the tokens of an attempt of account on provider that
// completed at at (the attempt itself is counted by Record).
func (s *Store) AddTokens(at time.Time, account, provider string, t Tokens) {
	if s == nil {
		return
	}
	for !s.get(&s.accounts, account).addTokens(at, t) { // as in Record
	}
	s.get(&s.providers, provider).addTokens(at, t)
}

// Forget drops an account's statistics (it left the pool), so deleted
// accounts do not hold memory. A nil Store ignores it.
func (s *Store) Forget(account string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	if r := s.accounts[account]; r != nil {
		r.mu.Lock()
		r.dead = true
		r.mu.Unlock()
		delete(s.accounts, account)
	}
	s.mu.Unlock()
}

func (s *Store) get(m *map[string]*series, key string) *series {
	s.mu.RLock()
	r := (*m)[key]
	s.mu.RUnlock()
	if r != nil {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r = (*m)[key]; r == nil {
		r = &series{}
		(*m)[key] = r
	}
	return r
}

func (s *Store) lookup(m map[string]*series, key string) *series {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return m[key]
}

// Account returns the summary of account's attempts over w as of now; an
// account without attempts has an empty summary.
func (s *Store) Account(account string, w Window, now time.Time) Summary {
	return s.lookup(s.accounts, account).summary(w, now)
}

// AccountPoints returns account's attempts over w as of now, one point per
// bucket, oldest first (for charts).
func (s *Store) AccountPoints(account string, w Window, now time.Time) []Point {
	return s.lookup(s.accounts, account).points(w, now)
}

// Provider returns the summary of provider's attempts over w as of now.
func (s *Store) Provider(provider string, w Window, now time.Time) Summary {
	return s.lookup(s.providers, provider).summary(w, now)
}

// Providers returns the providers with statistics, in no order.
func (s *Store) Providers() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.providers))
	for p := range s.providers {
		out = append(out, p)
	}
	return out
}

// Brief is the short read-out of an account over a window, for tables.
type Brief struct {
	Requests    uint64  `json:"requests"`
	SuccessRate float64 `json:"success_rate"` // 0..1; 0 without requests
	P95ms       float64 `json:"latency_p95_ms"`
}

// Brief returns account's Brief over w as of now; ok is false when the
// account had no attempt in w.
func (s *Store) Brief(account string, w Window, now time.Time) (b Brief, ok bool) {
	var m merged
	s.lookup(s.accounts, account).merge(w, now, &m)
	if m.requests == 0 {
		return Brief{}, false
	}
	return Brief{Requests: m.requests, SuccessRate: m.successRate(), P95ms: ms(m.latency(0.95))}, true
}

// Briefs returns every account's Brief over w as of now, by account ID;
// accounts without attempts in w are left out.
func (s *Store) Briefs(w Window, now time.Time) map[string]Brief {
	s.mu.RLock()
	keys := make([]string, 0, len(s.accounts))
	ser := make([]*series, 0, len(s.accounts))
	for k, r := range s.accounts {
		keys = append(keys, k)
		ser = append(ser, r)
	}
	s.mu.RUnlock()
	out := make(map[string]Brief, len(keys))
	var m merged
	for i, r := range ser {
		r.merge(w, now, &m)
		if m.requests == 0 {
			continue
		}
		out[keys[i]] = Brief{Requests: m.requests, SuccessRate: m.successRate(), P95ms: ms(m.latency(0.95))}
	}
	return out
}
