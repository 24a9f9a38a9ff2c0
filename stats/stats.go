// Package stats keeps per-account and per-provider statistics of upstream
// attempts over sliding windows (5m, 1h, 6h, 24h, 7d): attempts, success
// rate, failure classes, HTTP status codes, latency and time-to-first-token
// quantiles, and tokens.
//
// The short windows (5m, 1h) are kept in memory, by each instance for the
// attempts it made: each account (and each provider) has two rings of time
// buckets, 5 one-minute buckets and 12 five-minute ones, each plus the
// current one. A window is read as its complete buckets plus the current
// partial one, so it spans between its length and its length plus one
// bucket (5m: 5–6 minutes; 1h: 60–65 minutes). A ring's counts are one
// sorted slice of packed 4-byte entries (tally.go) — slot, key (failure
// class, status, latency or TTFT bin, token digit) and count — holding only
// the keys a bucket saw. An account's series is allocated on its first
// attempt, a ring whose window is empty is freed by Sweep, and an account
// with no attempt in the last hour's window is dropped (Sweep runs every
// SweepEvery of record time, started by Record): an idle account costs
// nothing.
//
// The long windows (6h, 24h, 7d) are read from storage
// (storage.AttemptStats, table attempt_stats): every attempt is also
// counted, by UTC hour, into a pending batch that Flush adds to the
// storage's hourly rows, so those windows are the deployment's, every
// instance's attempts summed, and cost no memory between flushes. They are
// read in buckets of whole hours (6h: 1-hour buckets, 24h: 2-hour, 7d:
// 14-hour), as their complete buckets plus the current one. A read of a
// long window flushes first, so it sees every attempt this instance
// recorded. Without storage (New(nil)) the long windows are empty.
// docs/benchmarks.md has the measured cost at 10,000 accounts.
//
// The gateway records every upstream attempt where it releases the lease
// (gateway.Server.release) and the tokens of the attempt that served the
// client; the admin API reads it (docs/admin-api.md#statistics).
package stats

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Window is one of the sliding windows statistics are kept over.
type Window struct {
	Name string        // "5m", "1h", "6h", "24h", "7d"
	Span time.Duration // the window's length
	step time.Duration // the width of its buckets
}

// Windows are the windows kept, shortest first: the first numRings in
// memory, the others in storage.
var Windows = [numWindows]Window{
	{Name: "5m", Span: 5 * time.Minute, step: time.Minute},
	{Name: "1h", Span: time.Hour, step: 5 * time.Minute},
	{Name: "6h", Span: 6 * time.Hour, step: time.Hour},
	{Name: "24h", Span: 24 * time.Hour, step: 2 * time.Hour},
	{Name: "7d", Span: 7 * 24 * time.Hour, step: 14 * time.Hour},
}

const (
	numWindows = 5
	numRings   = 2 // windows kept in memory: 5m and 1h
)

// Buckets is the number of complete buckets a window reads besides the current one.
func (w Window) buckets() int { return int(w.Span / w.step) }

// Step is the width of the window's buckets: its resolution in time.
func (w Window) Step() time.Duration { return w.step }

// Stored reports whether the window is read from storage (6h, 24h, 7d),
// and so counts every instance's attempts, rather than kept in memory by
// this instance (5m, 1h).
func (w Window) Stored() bool { return index(w) >= numRings }

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
// read lock on the key map, a record the account's mutex, then one of its
// provider's numShards parts' and one of the pending batch's shards', both
// chosen by the account (shardOf), so that releases of different accounts
// seldom wait for each other.
type Store struct {
	mu        sync.RWMutex
	accounts  map[string]*series
	providers map[string]*parts
	nextSweep atomic.Int64   // Unix nanoseconds of record time at which Record starts the next Sweep
	sweeps    sync.WaitGroup // the sweeps Record started (tests wait for them)
	since     time.Time

	backend atomic.Pointer[backend] // nil: the long windows are not kept
	pending pending
	flushMu sync.Mutex // one Flush at a time, so a read that flushed sees every earlier attempt stored
}

type backend struct{ storage.AttemptStats }

// SweepEvery is how often, in the time of the attempts recorded, Record
// starts a Sweep in the background.
const SweepEvery = 10 * time.Minute

// New returns an empty Store, counting from now on, whose long windows are
// kept in b (nil: not kept; see UseStorage).
func New(b storage.AttemptStats) *Store {
	s := &Store{accounts: map[string]*series{}, providers: map[string]*parts{}, since: time.Now().UTC().Truncate(time.Second)}
	s.UseStorage(b)
	return s
}

// UseStorage makes b the storage of the long windows (nil: none): the
// attempts recorded from then on are flushed to it, and the long windows
// read from it. The application calls it with its storage backend, under
// any wrapper the gateway's store has.
func (s *Store) UseStorage(b storage.AttemptStats) {
	if b == nil {
		s.backend.Store(nil)
		return
	}
	s.backend.Store(&backend{b})
}

// Since is when the Store was made: the short windows are kept in memory
// by each instance, from its start, so they reach back no further (the
// long ones are read from storage).
func (s *Store) Since() time.Time { return s.since }

// Record counts one attempt of account (its ID) on provider, completed at at.
func (s *Store) Record(at time.Time, account, provider string, a Attempt) {
	s.record(at, account, provider, a, nil)
}

// RecordServed counts one attempt of account on provider, completed at at,
// and the tokens it served: Record and AddTokens in one call, which takes
// each of the locks they share (the account's series, its provider's part,
// the pending batch's shard) once instead of twice. The gateway calls it
// when the attempt that served the client is released.
func (s *Store) RecordServed(at time.Time, account, provider string, a Attempt, t Tokens) {
	s.record(at, account, provider, a, &t)
}

// record is Record, counting the tokens t too when not nil.
func (s *Store) record(at time.Time, account, provider string, a Attempt, t *Tokens) {
	if s == nil {
		return
	}
	for !s.get(account).record(at, a, t) { // false: Forget or Sweep dropped it just now
	}
	sh := shardOf(account)
	s.provider(provider)[sh].record(at, a, t)
	if s.backend.Load() != nil {
		s.pending.attempt(at, sh, account, provider, a, t)
	}
	if ns, next := at.UnixNano(), s.nextSweep.Load(); ns >= next && s.nextSweep.CompareAndSwap(next, ns+int64(SweepEvery)) && next != 0 {
		s.sweeps.Go(func() { s.Sweep(at) })
	}
}

// Sweep frees what the in-memory statistics no longer need as of now: the
// rings of every series whose window holds nothing (an empty ring's arena
// is freed when larger than 64 bytes, kept for reuse when smaller), and the
// accounts with no attempt in either ring's window (idle for longer than
// the 1h window reaches). Record starts it every SweepEvery; it is safe to
// call at any time.
func (s *Store) Sweep(now time.Time) {
	if s == nil {
		return
	}
	// Under the read lock: Records of known accounts go on, and no list of
	// every key is allocated (the lock order, store then series, is
	// Forget's too).
	var idle []string
	s.mu.RLock()
	for _, ps := range s.providers {
		for i := range ps {
			ps[i].sweep(now)
		}
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
	// A map keeps its buckets when keys are deleted: once most accounts
	// went idle, copy the rest into a map of their size.
	// (maps.Clone would copy the buckets too).
	if len(idle) > 2*len(s.accounts) {
		m := make(map[string]*series, len(s.accounts))
		maps.Copy(m, s.accounts)
		s.accounts = m
	}
}

// AddTokens counts the tokens of an attempt of account on provider that
// completed at at (the attempt itself is counted by Record).
func (s *Store) AddTokens(at time.Time, account, provider string, t Tokens) {
	if s == nil {
		return
	}
	for !s.get(account).addTokens(at, &t) { // as in Record
	}
	sh := shardOf(account)
	s.provider(provider)[sh].addTokens(at, &t)
	if s.backend.Load() != nil {
		s.pending.tokens(at, sh, account, provider, t)
	}
}

// Forget drops an account's in-memory statistics (it left the pool), so
// deleted accounts do not hold memory; its stored hours stay until they
// age out (Prune). A nil Store ignores it.
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

// get returns account's series, making it.
func (s *Store) get(account string) *series {
	s.mu.RLock()
	r := s.accounts[account]
	s.mu.RUnlock()
	if r != nil {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r = s.accounts[account]; r == nil {
		r = &series{}
		s.accounts[account] = r
	}
	return r
}

// provider returns provider's parts, making them.
func (s *Store) provider(provider string) *parts {
	s.mu.RLock()
	ps := s.providers[provider]
	s.mu.RUnlock()
	if ps != nil {
		return ps
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ps = s.providers[provider]; ps == nil {
		ps = new(parts)
		s.providers[provider] = ps
	}
	return ps
}

// find returns the series of account, nil when none.
func (s *Store) find(account string) *series {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.accounts[account]
}

// findProvider returns the parts of provider, nil when none.
func (s *Store) findProvider(provider string) *parts {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.providers[provider]
}

// ErrNoStorage is Flush's error when the Store has no storage (New(nil));
// reads of a long window then answer empty, without an error.
var ErrNoStorage = errors.New("stats: no storage")

// Account returns the summary of account's attempts over w as of now; an
// account without attempts has an empty summary. A long window is read
// from storage: the error is the storage's.
func (s *Store) Account(ctx context.Context, account string, w Window, now time.Time) (Summary, error) {
	var m merged
	if err := s.merge(ctx, storage.StatsAccount, account, w, now, &m); err != nil {
		return Summary{}, err
	}
	return m.summary(w, now), nil
}

// AccountPoints returns account's attempts over w as of now, one point per
// bucket, oldest first (for charts). A long window is read from storage:
// the error is the storage's.
func (s *Store) AccountPoints(ctx context.Context, account string, w Window, now time.Time) ([]Point, error) {
	if !w.Stored() {
		return s.find(account).points(w, now), nil
	}
	rows, err := s.stored(ctx, storage.StatsAccount, account, w, now)
	if err != nil {
		return nil, err
	}
	first, last := span(w, now)
	ms := make([]merged, last-first+1)
	for _, c := range rows {
		n := c.Hour.UnixNano()/int64(w.step) + 1
		if n >= first && n <= last {
			ms[n-first].addStored(c.Key, c.N)
		}
	}
	out := make([]Point, len(ms))
	for i := range ms {
		ms[i].sums()
		out[i] = ms[i].point(time.Unix(0, (first+int64(i)-1)*int64(w.step)).UTC())
	}
	return out, nil
}

// Provider returns the summary of provider's attempts over w as of now. A
// long window is read from storage: the error is the storage's.
func (s *Store) Provider(ctx context.Context, provider string, w Window, now time.Time) (Summary, error) {
	var m merged
	if err := s.merge(ctx, storage.StatsProvider, provider, w, now, &m); err != nil {
		return Summary{}, err
	}
	return m.summary(w, now), nil
}

// Providers returns the providers with statistics over w as of now, in no
// order: those in memory for a short window, those with a stored hour in a
// long one.
func (s *Store) Providers(ctx context.Context, w Window, now time.Time) ([]string, error) {
	if w.Stored() {
		if err := s.Flush(ctx); err != nil {
			return nil, noStorage(err)
		}
		from, to := hours(w, now)
		return s.backend.Load().AttemptSubjects(ctx, storage.StatsProvider, from, to)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.providers))
	for p := range s.providers {
		out = append(out, p)
	}
	return out, nil
}

// noStorage turns ErrNoStorage into no error (nil): the caller answers
// empty.
func noStorage(err error) error {
	if errors.Is(err, ErrNoStorage) {
		return nil
	}
	return err
}

// merge adds up the attempts of subject (an account or a provider) over w
// as of now into m.
func (s *Store) merge(ctx context.Context, scope storage.StatsScope, subject string, w Window, now time.Time, m *merged) error {
	*m = merged{}
	if !w.Stored() {
		if scope == storage.StatsProvider {
			s.findProvider(subject).merge(w, now, m)
		} else {
			s.find(subject).merge(w, now, m)
		}
		return nil
	}
	if subject == "" {
		return nil
	}
	if err := s.Flush(ctx); err != nil {
		return noStorage(err)
	}
	from, to := hours(w, now)
	rows, err := s.backend.Load().AttemptTotals(ctx, scope, subject, from, to)
	if err != nil {
		return err
	}
	for _, c := range rows {
		m.addStored(c.Key, c.N)
	}
	m.sums()
	return nil
}

// hours returns the stored hours a long window reads as of now: from..to,
// to excluded.
func hours(w Window, now time.Time) (from, to time.Time) {
	first, last := span(w, now)
	return time.Unix(0, (first-1)*int64(w.step)).UTC(), time.Unix(0, last*int64(w.step)).UTC()
}

// stored flushes, then returns the stored rows of subject that w reads as
// of now, hour by hour (none without storage). An empty subject reads nothing (the
// storage would read every subject).
func (s *Store) stored(ctx context.Context, scope storage.StatsScope, subject string, w Window, now time.Time) ([]storage.AttemptCount, error) {
	if subject == "" {
		return nil, nil
	}
	if err := s.Flush(ctx); err != nil {
		return nil, noStorage(err)
	}
	from, to := hours(w, now)
	return s.backend.Load().AttemptCounts(ctx, scope, subject, from, to)
}

// Brief is the short read-out of an account over a window, for tables.
type Brief struct {
	Requests    uint64  `json:"requests"`
	SuccessRate float64 `json:"success_rate"` // 0..1; 0 without requests
	P95ms       float64 `json:"latency_p95_ms"`
}

func (m *merged) brief() Brief {
	return Brief{Requests: m.requests, SuccessRate: m.successRate(), P95ms: ms(m.latency(0.95))}
}

// HourBrief returns account's Brief over the last hour (the 1h window, in
// memory) as of now; ok is false when the account had no attempt in it.
func (s *Store) HourBrief(account string, now time.Time) (b Brief, ok bool) {
	var m merged
	s.find(account).merge(Windows[1], now, &m)
	if m.requests == 0 {
		return Brief{}, false
	}
	return m.brief(), true
}

// Briefs returns every account's Brief over w as of now, by account ID;
// accounts without attempts in w are left out. A long window is read from
// storage, every account's rows of it (at 10,000 busy accounts, 7d is
// millions of rows: an admin's occasional read, not a table's column).
func (s *Store) Briefs(ctx context.Context, w Window, now time.Time) (map[string]Brief, error) {
	if w.Stored() {
		return s.storedBriefs(ctx, w, now)
	}
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
		out[keys[i]] = m.brief()
	}
	return out, nil
}

func (s *Store) storedBriefs(ctx context.Context, w Window, now time.Time) (map[string]Brief, error) {
	out := map[string]Brief{}
	if err := s.Flush(ctx); err != nil {
		return out, noStorage(err)
	}
	from, to := hours(w, now)
	rows, err := s.backend.Load().AttemptTotals(ctx, storage.StatsAccount, "", from, to)
	if err != nil {
		return nil, err
	}
	var m merged
	for i := 0; i < len(rows); {
		j := i
		m = merged{}
		for ; j < len(rows) && rows[j].Subject == rows[i].Subject; j++ {
			m.addStored(rows[j].Key, rows[j].N)
		}
		if m.sums(); m.requests > 0 {
			out[rows[i].Subject] = m.brief()
		}
		i = j
	}
	return out, nil
}

// Flush adds the attempts recorded since the last Flush to storage (all
// or none: storage.AttemptStats.AddAttemptCounts); on an error they stay pending, for the next Flush (up to
// maxPending blocks of cells, pending.go; past it, the newest counts that
// need a new block are dropped and counted in Dropped). Without storage it returns an error wrapping ErrNoStorage and
// keeps nothing.
func (s *Store) Flush(ctx context.Context) error {
	b := s.backend.Load()
	if b == nil {
		return ErrNoStorage
	}
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	cs := s.pending.take()
	if len(cs) == 0 {
		return nil
	}
	if err := b.AddAttemptCounts(ctx, cs); err != nil {
		s.pending.putBack(cs)
		return fmt.Errorf("stats: flush %d counts: %w", len(cs), err)
	}
	return nil
}

// Pending is the number of hour × key cells waiting for the next Flush:
// the rows the next Flush hands to storage, except that a provider's cell
// counts once for each of the batch's shards that holds a part of it (up
// to 8: the pending batch is split by account, pending.go).
func (s *Store) Pending() int { return s.pending.cells() }

// Dropped is the number of counts the pending batch dropped because
// storage was unreachable for too long (the long windows miss them).
func (s *Store) Dropped() uint64 { return s.pending.dropped.Load() }

// FlushEvery is how often Run flushes: the most a long window lags behind
// another instance's attempts (this instance's are flushed by the read),
// and the counts a hard kill can lose. 30 s rather than 5 s: at 1,000
// attempts a second over 10,000 accounts a flush upserts about 20,000 rows
// every 5 s or 63,000 every 30 s (an account's attempts fold into its
// rows), about 12 µs of CPU an attempt against 6 µs (BenchmarkFlushInterval,
// docs/benchmarks.md); the long windows' buckets are an hour or longer.
const FlushEvery = 30 * time.Second

// Keep is how long stored hours are kept: the 7d window's reach (7 days
// and its current 14-hour bucket) and a margin.
const Keep = 8 * 24 * time.Hour

// Run flushes every FlushEvery and prunes the stored hours older than Keep
// every hour until ctx ends (the application flushes once more at
// shutdown, once the front has stopped). Errors are given to onErr (nil:
// ignored), at most one a minute.
func (s *Store) Run(ctx context.Context, onErr func(error)) {
	if onErr == nil {
		onErr = func(error) {}
	}
	t := time.NewTicker(FlushEvery)
	defer t.Stop()
	var lastErr, lastPrune time.Time
	report := func(err error) {
		if err != nil && !errors.Is(err, ErrNoStorage) && time.Since(lastErr) >= time.Minute {
			lastErr = time.Now()
			onErr(err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		report(s.Flush(fctx))
		if b := s.backend.Load(); b != nil && time.Since(lastPrune) >= time.Hour {
			lastPrune = time.Now()
			if _, err := b.PruneAttemptCounts(fctx, time.Now().Add(-Keep)); err != nil {
				report(fmt.Errorf("stats: prune: %w", err))
			}
		}
		cancel()
	}
}
