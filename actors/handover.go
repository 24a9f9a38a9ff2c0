package actors

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// This file hands an account's learned state to its next owner when it
// moves between instances (Config.Fenced with Config.States; docs/fleet.md,
// "State handover"): the owner saves the State when a part of it that
// matters changes and when the account has drained away, and an actor
// spawned here starts from the saved State, granting nothing until it has
// been read.

// State is the part of an account's actor state that survives a change of
// owner: its cooldown, health and usage windows. Times are absolute (UTC
// wall clock), so the next owner honours a cooldown to its end whatever
// happened in between; a cooldown already over is dropped on restore.
type State struct {
	// Status is carried when it is StatusCooling, or StatusUnauthorized or
	// StatusBanned for the same stored configuration (AccountVersion: new
	// credentials clear them); otherwise the account starts active.
	Status         Status    `json:"status"`
	CooldownUntil  time.Time `json:"cooldown_until,omitzero"`
	CooldownReason string    `json:"cooldown_reason,omitempty"`
	// AccountVersion is the stored account's version (storage.Account.Version)
	// the state was learned under.
	AccountVersion int64 `json:"account_version"`
	// Backoff is the step of the next rate or transient backoff (30 s × 2^n).
	Backoff       int                            `json:"backoff,omitempty"`
	Successes     uint64                         `json:"successes,omitempty"`
	Failures      uint64                         `json:"failures,omitempty"`
	SuccessStreak int                            `json:"success_streak,omitempty"`
	FailureStreak int                            `json:"failure_streak,omitempty"`
	EWMASuccess   float64                        `json:"ewma_success"`
	EWMALatency   time.Duration                  `json:"ewma_latency,omitempty"` // ns
	EWMATTFT      time.Duration                  `json:"ewma_ttft,omitempty"`    // ns
	LastFailure   [upstream.NumClasses]time.Time `json:"last_failure"`
	Windows       []UsageWindow                  `json:"windows,omitempty"`
	ActiveLimit   string                         `json:"active_limit,omitempty"`
	Families      []LimitFamily                  `json:"families,omitempty"`
	Plan          string                         `json:"plan,omitempty"`
}

// StateStore keeps each account's State where the deployment's instances
// all reach it (the shared cache: cmd/troupe keeps it in Redis with a TTL).
// Both methods are called from goroutines of the System's, never from an
// actor, and must honour ctx.
type StateStore interface {
	// SaveState stores st as account id's state, replacing the last.
	SaveState(ctx context.Context, id string, st State) error
	// LoadState returns account id's last saved state; ok is false when
	// none is stored.
	LoadState(ctx context.Context, id string) (st State, ok bool, err error)
}

// stateTimeout bounds one save or load: an account spawned here grants
// nothing until its load has answered or failed.
const stateTimeout = 2 * time.Second

// states saves the accounts' states in the background: the latest State of
// each account waits in pending (a later one replaces it) for one writer
// goroutine, so an actor never waits on the store.
type states struct {
	store StateStore
	log   *slog.Logger

	mu      sync.Mutex
	pending map[string]State
	wake    chan struct{} // buffer 1
	ctx     context.Context
	stop    context.CancelFunc
	done    chan struct{}
}

func newStates(store StateStore, log *slog.Logger) *states {
	ctx, stop := context.WithCancel(context.Background())
	s := &states{store: store, log: log, pending: make(map[string]State), wake: make(chan struct{}, 1), ctx: ctx, stop: stop, done: make(chan struct{})}
	go s.run()
	return s
}

// save queues st as account id's latest state.
func (s *states) save(id string, st State) {
	s.mu.Lock()
	s.pending[id] = st
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// saveNow stores st at once (an account that has drained away: the next
// owner may take it as soon as this returns), dropping any queued state of
// id, which is older.
func (s *states) saveNow(id string, st State) {
	s.mu.Lock()
	delete(s.pending, id)
	s.mu.Unlock()
	s.write(id, st)
}

func (s *states) write(id string, st State) {
	ctx, cancel := context.WithTimeout(s.ctx, stateTimeout)
	defer cancel()
	if err := s.store.SaveState(ctx, id, st); err != nil && s.ctx.Err() == nil {
		s.log.Warn("account state not saved: its next owner starts without it", "account_id", id, "err", err)
	}
}

func (s *states) load(ctx context.Context, id string) (State, bool) {
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	st, ok, err := s.store.LoadState(ctx, id)
	if err != nil {
		if ctx.Err() == nil || s.ctx.Err() == nil {
			s.log.Warn("account state not loaded: the account starts afresh", "account_id", id, "err", err)
		}
		return State{}, false
	}
	return st, ok
}

func (s *states) run() {
	defer close(s.done)
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		batch := s.pending
		s.pending = make(map[string]State, len(batch))
		s.mu.Unlock()
		for id, st := range batch {
			s.write(id, st)
		}
	}
}

// flush writes what is queued now.
func (s *states) flush() {
	s.mu.Lock()
	batch := s.pending
	s.pending = make(map[string]State, len(batch))
	s.mu.Unlock()
	for id, st := range batch {
		s.write(id, st)
	}
}

// close writes what is queued and stops the writer.
func (s *states) close() {
	s.flush()
	s.stop()
	<-s.done
}

// --- account ------------------------------------------------------------------------

// accountRestore hands a spawned account its saved state (ok false: none).
type accountRestore struct {
	st State
	ok bool
}

// handoverKey is what, when it changes, makes the account save its state:
// the status and cooldown, the windows and families (new slices on every
// report), and health in coarse steps (the success average by tenths,
// whether it is failing). Exact counters and averages ride along with
// those saves and the final one of a drain.
type handoverKey struct {
	status   Status
	until    time.Time
	windows  *UsageWindow
	families *LimitFamily
	limit    string
	health   int8 // EWMASuccess in tenths
	failing  bool // FailureStreak > 0
}

func (a *account) handoverKey() handoverKey {
	k := handoverKey{status: a.view.Status, until: a.view.CooldownUntil, limit: a.view.ActiveLimit,
		health: int8(a.view.EWMASuccess * 10), failing: a.view.FailureStreak > 0}
	if len(a.view.Windows) > 0 {
		k.windows = &a.view.Windows[0]
	}
	if len(a.view.Families) > 0 {
		k.families = &a.view.Families[0]
	}
	return k
}

// state returns the account's State now.
func (a *account) state() State {
	v := a.view
	return State{
		Status: v.Status, CooldownUntil: v.CooldownUntil, CooldownReason: v.CooldownReason,
		AccountVersion: a.cfg.account.Version, Backoff: a.backoff,
		Successes: v.Successes, Failures: v.Failures, SuccessStreak: v.SuccessStreak, FailureStreak: v.FailureStreak,
		EWMASuccess: v.EWMASuccess, EWMALatency: v.EWMALatency, EWMATTFT: v.EWMATTFT, LastFailure: v.failures().LastFailure,
		Windows: v.Windows, ActiveLimit: v.ActiveLimit, Families: v.Families, Plan: v.Plan,
	}
}

// startRestore has a freshly spawned account read its saved state before
// it grants (Config.States): it is unfenced until accountRestore arrives.
func (a *account) startRestore() {
	if a.cfg.states == nil {
		return
	}
	a.restoring = true
	a.edit().Moving = true
	id, pid, eng, ctx := a.view.ID, a.pid(), a.eng(), a.goContext()
	g := a.gos // made by goContext
	g.goroutines.Add(1)
	go func() {
		defer g.goroutines.Done()
		st, ok := a.cfg.states.load(ctx, id)
		eng.Send(pid, accountRestore{st: st, ok: ok})
	}()
}

// restore applies a saved state and lets the account grant.
func (a *account) restore(c *mailCtx, m accountRestore) {
	if !a.restoring {
		return
	}
	a.restoring = false
	if m.ok {
		a.apply(m.st)
	}
	k := a.handoverKey()
	a.saved = &k
	if a.view.Moving && !a.draining && (a.cfg.fence == nil || a.cfg.fence.Holds(a.cfg.now())) {
		a.edit().Moving = false
	}
	a.publish(c)
}

// apply takes over st, learned by the account's previous owner.
func (a *account) apply(st State) {
	v := a.edit() // restore publishes
	now := a.cfg.now()
	a.backoff = st.Backoff
	v.Successes, v.Failures = st.Successes, st.Failures
	v.SuccessStreak, v.FailureStreak = st.SuccessStreak, st.FailureStreak
	v.EWMASuccess, v.EWMALatency, v.EWMATTFT = st.EWMASuccess, st.EWMALatency, st.EWMATTFT
	if lf := (LastFailures{LastFailure: st.LastFailure, LastTimeout: v.TimedOutAt()}); lf.any() {
		v.LastFailures = &lf
	} else {
		v.LastFailures = nil
	}
	v.Windows, v.ActiveLimit, v.Families = st.Windows, st.ActiveLimit, st.Families
	if st.Plan != "" {
		v.Plan = st.Plan
	}
	if v.Status == StatusDisabled {
		return // the operator's word
	}
	switch st.Status {
	case StatusCooling:
		if now.Before(st.CooldownUntil) {
			v.Status, v.CooldownUntil, v.CooldownReason = StatusCooling, st.CooldownUntil, st.CooldownReason
			a.coolGen++
			gen, pid, eng := a.coolGen, a.pid(), a.eng()
			a.coolTimer = time.AfterFunc(st.CooldownUntil.Sub(now), func() { eng.Send(pid, accountCooldownEnd{gen: gen}) })
			if st.CooldownReason == upstream.ClassQuota.String() {
				a.armProbe()
			}
		}
	case StatusUnauthorized, StatusBanned:
		if st.AccountVersion == a.cfg.account.Version {
			v.Status = st.Status
		}
	}
}

// saveState queues the account's state when a part that matters changed
// since the last save (called on publish).
func (a *account) saveState() {
	if a.cfg.states == nil || a.restoring {
		return
	}
	k := a.handoverKey()
	if a.saved == nil {
		a.saved = new(handoverKey)
	}
	if k != *a.saved {
		*a.saved = k
		a.cfg.states.save(a.view.ID, a.state())
	}
}
