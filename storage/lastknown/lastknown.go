// Package lastknown keeps the API keys an instance knows serving through a
// storage outage. Store wraps a storage.Store: while the backend answers,
// every call goes to it and the wrapper remembers the API keys it saw; while
// it does not, APIKeyByHash is answered from those keys' last known state,
// so requests with known keys go on being served (and keys revoked before
// the outage stay refused) instead of every request failing once the
// gateway's own key cache expires.
//
// # What the last known state is
//
// The wrapper holds every API key (a full ListAPIKeys at start, again every
// RefreshInterval, and at once after a key change), plus the answer of every
// successful APIKeyByHash. Each is stamped with the key-change generation it
// was read at. KeysChanged — called by the instance when a key change is
// announced (the cache's "keys" channel), and by the wrapper itself after
// its own CreateAPIKey, UpdateAPIKey and DeleteAPIKey — starts a new
// generation and a refresh. During an outage a lookup is answered only from
// state of the current generation:
//
//   - a key read in the current generation: its stored state (a key disabled
//     or expired before the outage stays refused by the gateway);
//   - a hash absent from a complete list of the current generation:
//     storage.ErrNotFound (a deleted key stays unknown);
//   - anything else (a change was announced and no refresh has succeeded
//     since; a hash read at no point): an error, as without the wrapper —
//     the gateway refuses the request rather than trust stale state.
//
// # States
//
// Healthy: calls go to the backend. An APIKeyByHash or a refresh that fails
// (other than ErrNotFound or the caller's context ending) turns the wrapper
// degraded and logs one warning. Degraded: APIKeyByHash does not touch the
// backend (a database that hangs costs nothing per request); every
// ProbeInterval the backend is pinged (storage.Pinger) and its keys listed,
// and the first success turns it healthy again, logging one line with the
// outage's length and the lookups answered from the last known state. Other
// methods always go to the backend and fail as it fails.
package lastknown

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// Defaults for the zero Options.
const (
	DefaultProbeInterval   = time.Second
	DefaultProbeTimeout    = 2 * time.Second
	DefaultRefreshInterval = time.Minute
)

// Options configure a Store. The zero value is valid.
type Options struct {
	// ProbeInterval is how often an unavailable backend is probed. Default
	// DefaultProbeInterval.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe or refresh. Default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// RefreshInterval is how often, while healthy, every API key is read
	// again (catching changes no one announced). Default
	// DefaultRefreshInterval.
	RefreshInterval time.Duration
	// Logger receives one warning per outage and one line per recovery.
	// Default slog.Default().
	Logger *slog.Logger
	// OnChange, if set, is called with true when the wrapper turns degraded
	// and with false when it turns healthy, from the goroutine that noticed.
	// It must be quick and must not call the Store.
	OnChange func(degraded bool)
}

// Stats is a snapshot of a Store's state and lifetime counters, for
// metrics: Degraded and Keys as gauges, the rest as counters.
type Stats struct {
	Degraded     bool      // the backend is unavailable now
	Since        time.Time // when the current outage began; zero when healthy
	Outages      uint64    // times the wrapper turned degraded
	Recoveries   uint64    // times it turned healthy again
	StaleAnswers uint64    // APIKeyByHash answered from the last known state
	Unverified   uint64    // APIKeyByHash that failed during an outage: no current state for the hash
	Keys         int       // API keys known now
}

// Store is a storage.Store that answers API-key lookups from their last
// known state while its backend is unavailable; see the package
// documentation. Methods it does not override go to the backend. It is
// safe for concurrent use; Close stops it and closes the backend.
type Store struct {
	storage.Store
	opts Options
	log  *slog.Logger

	mu      sync.RWMutex
	keys    map[string]known // key hash → last known state
	gen     uint64           // key-change generation; KeysChanged bumps it
	fullGen uint64           // generation of the last complete list; keys absent from it do not exist
	hasFull bool             // a complete list was installed

	degraded atomic.Bool
	since    atomic.Int64 // Unix ns when the current outage began
	kick     chan struct{}

	outages, recoveries, stale, unverified atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	loop   sync.WaitGroup
	closed sync.Once
}

// known is one API key as last read, at generation gen.
type known struct {
	key storage.APIKey
	gen uint64
}

var (
	_ storage.Store          = (*Store)(nil)
	_ storage.HealthReporter = (*Store)(nil)
)

// errUnavailable is the cause reported for lookups made while degraded,
// which do not reach the backend.
var errUnavailable = errors.New("storage unavailable")

// New wraps store, reads every API key once (its error is returned, and
// store is left open) and starts the background refresh and probe.
func New(ctx context.Context, store storage.Store, opts Options) (*Store, error) {
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = DefaultProbeTimeout
	}
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = DefaultRefreshInterval
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Store{Store: store, opts: opts, log: log, keys: map[string]known{}, kick: make(chan struct{}, 1)}
	if err := s.refresh(ctx); err != nil {
		return nil, fmt.Errorf("lastknown: read api keys: %w", err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.loop.Add(1)
	go s.run()
	return s, nil
}

// APIKeyByHash returns the backend's answer, remembering it; when the
// backend is unavailable, the hash's last known state (see the package
// documentation), or an error wrapping the backend's when there is none.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (storage.APIKey, error) {
	cause := errUnavailable
	if !s.degraded.Load() {
		gen := s.generation()
		k, err := s.Store.APIKeyByHash(ctx, hash)
		switch {
		case err == nil:
			s.remember(hash, known{key: k, gen: gen})
			return k, nil
		case errors.Is(err, storage.ErrNotFound):
			s.forget(hash, gen)
			return k, err
		case ctx.Err() != nil:
			return k, err // the caller gave up: says nothing about storage
		}
		s.fail(err)
		cause = err
	}
	return s.lastKnown(hash, cause)
}

// lastKnown answers a lookup from the current generation's state.
func (s *Store) lastKnown(hash string, cause error) (storage.APIKey, error) {
	s.mu.RLock()
	k, ok := s.keys[hash]
	gen, complete := s.gen, s.hasFull && s.fullGen == s.gen
	s.mu.RUnlock()
	switch {
	case ok && k.gen == gen:
		s.stale.Add(1)
		return k.key, nil
	case !ok && complete:
		s.stale.Add(1)
		return storage.APIKey{}, fmt.Errorf("%w (last known state: %v)", storage.ErrNotFound, cause)
	}
	s.unverified.Add(1)
	return storage.APIKey{}, fmt.Errorf("lastknown: api key cannot be verified: no current state while storage is unavailable: %w", cause)
}

func (s *Store) generation() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gen
}

// remember stores k unless a newer state of the hash is held.
func (s *Store) remember(hash string, k known) {
	s.mu.Lock()
	if cur, ok := s.keys[hash]; !ok || cur.gen <= k.gen {
		s.keys[hash] = k
	}
	s.mu.Unlock()
}

// forget drops the hash's state after the backend said it does not exist
// at generation gen (a key deleted since the last list).
func (s *Store) forget(hash string, gen uint64) {
	s.mu.Lock()
	if cur, ok := s.keys[hash]; ok && cur.gen <= gen {
		delete(s.keys, hash)
	}
	s.mu.Unlock()
}

// KeysChanged announces that API keys changed (created, updated, revoked)
// somewhere: state read before it is no longer served during an outage,
// and every key is read again at once. It does not block.
func (s *Store) KeysChanged() {
	s.mu.Lock()
	s.gen++
	s.mu.Unlock()
	s.Refresh()
}

// Refresh asks for every key to be read again soon, without distrusting
// the state held: for when changes may have been missed rather than made
// (the channel announcing them was down). It does not block.
func (s *Store) Refresh() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// CreateAPIKey creates the key in the backend and announces the change.
func (s *Store) CreateAPIKey(ctx context.Context, k storage.APIKey) (storage.APIKey, error) {
	defer s.KeysChanged()
	return s.Store.CreateAPIKey(ctx, k)
}

// UpdateAPIKey updates the key in the backend and announces the change.
func (s *Store) UpdateAPIKey(ctx context.Context, k storage.APIKey) (storage.APIKey, error) {
	defer s.KeysChanged()
	return s.Store.UpdateAPIKey(ctx, k)
}

// DeleteAPIKey deletes the key in the backend and announces the change.
func (s *Store) DeleteAPIKey(ctx context.Context, idOrName string) error {
	defer s.KeysChanged()
	return s.Store.DeleteAPIKey(ctx, idOrName)
}

// refresh reads every API key and installs them as a complete list of the
// generation current when the read began.
func (s *Store) refresh(ctx context.Context) error {
	gen := s.generation()
	list, err := s.Store.ListAPIKeys(ctx)
	if err != nil {
		return err
	}
	keys := make(map[string]known, len(list))
	for _, k := range list {
		keys[k.Hash] = known{key: k, gen: gen}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hasFull && s.fullGen > gen {
		return nil // a newer list was installed while this one was read
	}
	for h, cur := range s.keys {
		if cur.gen > gen { // read by a lookup after the list: newer
			keys[h] = cur
		}
	}
	s.keys, s.fullGen, s.hasFull = keys, gen, true
	return nil
}

// fail turns the wrapper degraded after err from the backend.
func (s *Store) fail(err error) {
	if !s.degraded.CompareAndSwap(false, true) {
		return
	}
	s.since.Store(time.Now().UnixNano())
	s.outages.Add(1)
	s.log.Warn("storage unavailable: serving the API keys known before the outage from their last known state until it recovers",
		"err", err.Error())
	if s.opts.OnChange != nil {
		s.opts.OnChange(true)
	}
}

// recovered turns the wrapper healthy.
func (s *Store) recovered() {
	if !s.degraded.CompareAndSwap(true, false) {
		return
	}
	s.recoveries.Add(1)
	outage := time.Duration(time.Now().UnixNano() - s.since.Swap(0))
	s.log.Info("storage recovered",
		"outage", outage.Round(time.Millisecond).String(),
		"stale_answers", s.stale.Load(), "unverified", s.unverified.Load())
	if s.opts.OnChange != nil {
		s.opts.OnChange(false)
	}
}

// run refreshes the keys every RefreshInterval and after KeysChanged while
// healthy, and probes every ProbeInterval while degraded, until Close.
func (s *Store) run() {
	defer s.loop.Done()
	t := time.NewTicker(s.opts.ProbeInterval)
	defer t.Stop()
	last := time.Now()
	for {
		kicked := false
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
			kicked = true
		}
		degraded := s.degraded.Load()
		if !degraded && !kicked && time.Since(last) < s.opts.RefreshInterval {
			continue
		}
		epoch := s.outages.Load()
		ctx, cancel := context.WithTimeout(s.ctx, s.opts.ProbeTimeout)
		err := s.probe(ctx, degraded)
		cancel()
		switch {
		case s.ctx.Err() != nil:
			return
		case err != nil:
			s.fail(err)
		default:
			last = time.Now()
			if s.outages.Load() == epoch { // else an outage began during the probe: it proves nothing
				s.recovered()
			}
		}
	}
}

// probe pings the backend (when degraded and it can) and reads the keys.
func (s *Store) probe(ctx context.Context, degraded bool) error {
	if p, ok := s.Store.(storage.Pinger); ok && degraded {
		if err := p.Ping(ctx); err != nil {
			return err
		}
	}
	return s.refresh(ctx)
}

// Degraded reports whether the backend is unavailable now.
func (s *Store) Degraded() bool { return s.degraded.Load() }

// Stats returns a snapshot of the state and counters.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	n := len(s.keys)
	s.mu.RUnlock()
	st := Stats{
		Degraded:     s.degraded.Load(),
		Outages:      s.outages.Load(),
		Recoveries:   s.recoveries.Load(),
		StaleAnswers: s.stale.Load(),
		Unverified:   s.unverified.Load(),
		Keys:         n,
	}
	if st.Degraded {
		st.Since = time.Unix(0, s.since.Load())
	}
	return st
}

// Health reports the storage's state for /readyz: degraded during an
// outage (known keys still serve), never down (an instance that could not
// reach storage at all would not have started).
func (s *Store) Health() storage.Health {
	h := storage.Health{Name: "storage"}
	if st := s.Stats(); st.Degraded {
		h.Degraded, h.Since = true, st.Since
		h.Detail = "storage unavailable: API keys known before the outage serve from their last known state; " +
			"new or changed keys and admin writes fail until it returns"
	}
	return h
}

// Stop stops the background loop and leaves the backend open, for a caller
// that still owns it. The Store then serves as its backend does, without
// refreshing the keys or probing. It is idempotent.
func (s *Store) Stop() {
	s.cancel()
	s.loop.Wait()
}

// Close stops the background loop and closes the backend. It is
// idempotent; later calls return nil.
func (s *Store) Close() error {
	var err error
	s.closed.Do(func() {
		s.Stop()
		err = s.Store.Close()
	})
	return err
}
