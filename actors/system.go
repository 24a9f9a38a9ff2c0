// Package actors holds Troupe's actors: the pool supervisor, one account actor
// per upstream account, the scheduler that picks accounts, and the usage
// recorder. System is the Go API the gateway uses; it builds the messages.
//
// See actors/README.md for the design: who owns what, the acquire protocol,
// and why a lease can never be granted past an account's limit.
package actors

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/google/uuid"
	"github.com/troupe-gw/troupe/internal/ratelog"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Config configures a System. Zero values take the documented defaults.
type Config struct {
	Store         UsageWriter      // where usage records go; required
	Transport     TransportFactory // builds each account's transport; required
	Policy        Policy           // default LeastInFlight
	MaxWaiters    int              // parked requests across the pool; default 10,000
	UsageBatch    int              // records per usage write; default 500
	UsageInterval time.Duration    // longest a record waits before it is written; default 250 ms
	UsageMaxQueue int              // records held before new ones are dropped; default 1,000,000
	Logger        *slog.Logger     // default slog.Default()
	// WSIdleTimeout closes an upstream WebSocket connection idle this long;
	// default DefaultWSIdleTimeout (5 min).
	WSIdleTimeout time.Duration
	// Refresh, when set, refreshes the OAuth tokens of codex accounts
	// (RefreshConfig); nil leaves tokens as they are.
	Refresh *RefreshConfig
	// QuotaProbe is how often an account cooling for quota sends the
	// upstream a minimal request (1 output token) to see whether the quota
	// is back: a 2xx ends the cooldown at once, a quota refusal with a reset
	// replaces the recorded one. Default DefaultQuotaProbe (1 min); negative
	// turns probes off (the cooldown then lasts until the recorded reset).
	QuotaProbe time.Duration
	// OnUsageWritten, when set, is called from the recorder's writer after each
	// batch with its size and error (for metrics).
	OnUsageWritten func(n int, err error)
	// Clock is the time the scheduler and the accounts judge by: cooldowns,
	// failure decay, usage windows, stickiness, recheck_after and wait
	// deadlines. Default time.Now. troupe policy replay sets the recorded
	// time, so that a replayed window's cooldowns last as long in its
	// timeline as they did. Timers that end cooldowns still run on real time;
	// a cooldown past its end is over at the next pick either way.
	Clock func() time.Time
	// Fenced runs an account's actor only on the instance that owns it
	// (package fleet): PutAccount keeps the configuration, Own spawns the
	// actor under its ownership lease (a Fence), Disown drains and stops it.
	// Default false: every account put runs here (one instance).
	Fenced bool
	// Open opens the credentials of an account put with them still sealed
	// (storage.Account.Sealed: read from storage.Accounts.AccountChanges
	// with open false) when its actor is spawned or updated here. With
	// Fenced, only the instance that owns an account thus decrypts its
	// credentials, once per change of the account. Nil, or an error: the
	// account joins disabled (logged without the secret).
	Open func(sealed string) (storage.Credentials, error)
	// States, with Fenced, hands an account's learned state — cooldown
	// until and reason, health, usage windows (State) — to its next owner:
	// the owner saves it when its status, cooldown, windows or limit
	// families change and when the account has drained away (before its
	// lease is released), and an actor spawned here reads it first,
	// granting nothing until the read answers (at most 2 s; a failed read
	// starts afresh, logged). Nil: a new owner starts afresh.
	States StateStore
	// Seed seeds the scheduler's top-k jitter; 0 seeds it from the clock.
	// Simulations and replays set it so the same input routes the same way.
	Seed uint64
}

// UsageWriter is what the usage recorder needs from storage (storage.Usage
// satisfies it): write a batch in one transaction, skipping records already stored.
// InsertUsage must not keep recs, nor a pointer into it, after it returns:
// the recorder clears the slice and fills it again with a later batch.
type UsageWriter interface {
	InsertUsage(ctx context.Context, recs []storage.UsageRecord) error
}

// ErrorEventWriter is the optional capability of a UsageWriter to store
// failed attempts (storage.RequestLog satisfies it); see System.RecordErrors.
type ErrorEventWriter interface {
	InsertErrorEvents(ctx context.Context, evs []storage.ErrorEvent) error
}

// System runs the actors. Its methods are safe for concurrent use.
type System struct {
	engine    *actor.Engine
	pool      *actor.PID
	sched     *actor.PID
	schedBox  *mailbox // sched's mailbox: Acquire sends to it directly (sendInline)
	usage     *actor.PID
	usageBox  *mailbox  // usage's mailbox, for Record's deferred sends
	boxes     *mailPool // the account actors' workers
	snapshots snapIndex // account ID → *snapshot (snapindex.go)
	timers    sync.Pool
	stopped   atomic.Bool
	ws        wsPools          // upstream WebSocket pools, one per account (websocket.go)
	stall     *stallClock      // bounds the wait for the scheduler's first answer (stall.go)
	now       func() time.Time // Config.Clock
	fenced    bool             // Config.Fenced
	remote    remoteSide       // routing across instances (remote.go)
	states    *states          // Config.States with Fenced; nil otherwise
}

// Start spawns the scheduler, the usage recorder and the pool supervisor.
func Start(cfg Config) (*System, error) {
	if cfg.Store == nil || cfg.Transport == nil {
		return nil, errors.New("actors: Store and Transport are required")
	}
	if cfg.Policy == nil {
		cfg.Policy = LeastInFlight{}
	}
	if cfg.MaxWaiters <= 0 {
		cfg.MaxWaiters = 10000
	}
	if cfg.UsageBatch <= 0 {
		cfg.UsageBatch = 500
	}
	if cfg.UsageInterval <= 0 {
		cfg.UsageInterval = 250 * time.Millisecond
	}
	if cfg.UsageMaxQueue <= 0 {
		cfg.UsageMaxQueue = 1_000_000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	s := &System{engine: e, now: cfg.Clock, fenced: cfg.Fenced}
	s.remote.factory = cfg.Transport
	if cfg.Fenced && cfg.States != nil {
		s.states = newStates(cfg.States, cfg.Logger)
	}
	s.ws.idle = cfg.WSIdleTimeout
	var ref *refresher
	if r := cfg.Refresh; r != nil {
		if r.OAuth == nil || r.Store == nil || r.Leases == nil {
			return nil, errors.New("actors: Refresh needs OAuth, Store and Leases")
		}
		rc := *r
		if rc.Lead <= 0 {
			rc.Lead = DefaultRefreshLead
		}
		if rc.Owner == "" {
			rc.Owner = uuid.NewString()
		}
		ref = &refresher{cfg: rc, log: cfg.Logger}
	}
	s.schedBox = newMailbox(e, newScheduler(schedulerConfig{
		policy:    cfg.Policy,
		maxWaiter: cfg.MaxWaiters,
		log:       cfg.Logger,
		now:       cfg.Clock,
		rand:      seededRand(cfg.Seed),
		// Read when a restarted scheduler starts, long after Start has
		// set s.pool (the panic's message came through the engine).
		restarted: func() { e.Send(s.pool, poolRepublish{}) },
	}), "scheduler", "0", cfg.Logger)
	s.sched = e.SpawnProc(s.schedBox)
	s.usageBox = newMailbox(e, newRecorder(usageConfig{
		store:     cfg.Store,
		batchSize: cfg.UsageBatch,
		interval:  cfg.UsageInterval,
		maxQueued: cfg.UsageMaxQueue,
		log:       cfg.Logger,
		onWritten: cfg.OnUsageWritten,
	}), "usage", "0", cfg.Logger)
	s.usage = e.SpawnProc(s.usageBox)
	s.boxes = newMailPool(0)
	// The pool runs on a mailbox of its own too: hollywood's inbox kept the
	// ring its start's burst of puts grew (10,000 envelopes at 10,000
	// accounts) for the process's life; a mailbox's buffers shrink
	// (mailKeep).
	s.pool = e.SpawnProc(newMailbox(e, newPool(poolConfig{
		scheduler: s.schedBox,
		boxes:     s.boxes,
		transport: cfg.Transport,
		refresh:   ref,
		snapshots: &s.snapshots,
		log:       cfg.Logger,
		now:       cfg.Clock,
		probe:     probeEvery(cfg.QuotaProbe),
		stateLog:  ratelog.New(stateLogBurst, stateLogWindow),
		fenced:    cfg.Fenced,
		open:      cfg.Open,
		states:    s.states,
	}), "pool", "0", cfg.Logger))
	s.stall = newStallClock()
	return s, nil
}

// SetPolicy makes p the scheduler's routing policy. The pool is rescored in
// chunks while picks go on; p is used from the scheduler actor only.
func (s *System) SetPolicy(p Policy) { s.engine.Send(s.sched, schedPolicy{policy: p}) }

// SetCanary makes p the canary policy: requests with AcquireRequest.Canary
// set are judged by it, the others by the active policy, with both verdicts
// indexed side by side. nil removes the canary (its requests fall back to
// the active policy at once). To promote a canary, SetPolicy it (a fresh
// instance: a Policy belongs to one slot) and SetCanary(nil). p is used from
// the scheduler actor only.
func (s *System) SetCanary(p Policy) { s.engine.Send(s.sched, schedCanary{policy: p}) }

// PutAccount adds the account to the pool, or applies its new configuration.
// It returns before the account actor has started; its view follows shortly.
func (s *System) PutAccount(a storage.Account) { s.engine.Send(s.pool, poolPut{account: a}) }

// RemoveAccount stops the account's actor. Leases it granted may still be
// released; they are ignored.
func (s *System) RemoveAccount(id string) {
	s.engine.Send(s.pool, poolRemove{id: id})
	s.dropWSPool(id)
}

// Acquire asks the scheduler for a lease for req. It waits at most req.MaxWait
// for capacity (plus message latency), and returns early when ctx is done.
// Errors are *AcquireError (ErrNoAccount, ErrUnavailable, ErrBusy), ctx's
// error, or the one req.Wait refused the wait with. A returned lease must be passed to Release exactly once.
func (s *System) Acquire(ctx context.Context, req AcquireRequest) (*Lease, error) {
	st := &acquireState{
		AcquireRequest: req,
		key:            routeKey{group: req.Group, model: req.Model},
		reply:          make(chan acquireReply, 2),
	}
	if req.MaxWait > 0 {
		st.deadline = s.now().Add(req.MaxWait)
	}
	// An idle scheduler's turn is taken here (sendInline): the pick, and
	// the grant to an idle account (runHere), run on this goroutine, and
	// the reply is in st.reply when the send returns; no goroutine is woken.
	s.schedBox.sendInline(schedAcquire{req: st}, nil)
	// The scheduler answers at once: with the lease (through the account),
	// a failure, or a notice that it parked the request. Only a parked
	// request needs a timer; until then the stall clock's coarse tick bounds
	// a stalled scheduler. (A timer per acquire costs the runtime's timer
	// heap, and it may wake the network poller: docs/benchmarks.md.) The
	// bound is counted in ticks, so an acquire reads no clock: the first
	// tick may come at once, so the k-th comes k-1 periods on at least.
	stallTicks := int((max(req.MaxWait, stallBound)+stallTick-1)/stallTick) + 1
	// The reply is usually in hand already (an idle scheduler's turn was
	// taken): taken without asking ctx for its Done channel, which a
	// request's context makes on first ask (an allocation a request).
	select {
	case r := <-st.reply:
		if r.parked {
			return s.awaitParked(ctx, st)
		}
		return r.result()
	default:
	}
	for ticks := 0; ; {
		tick := s.stall.tick()
		select {
		case r := <-st.reply:
			if r.parked {
				return s.awaitParked(ctx, st)
			}
			return r.result()
		case <-ctx.Done():
			return s.abandon(st, ctx.Err())
		case <-tick:
			if ticks++; s.stopped.Load() || ticks >= stallTicks {
				return s.abandon(st, &AcquireError{Err: ErrBusy, RetryAfter: time.Second})
			}
		}
	}
}

// stallBound bounds how long a caller waits for the scheduler's first
// answer when its MaxWait is shorter (a scheduler answers in microseconds;
// this only ends a stall).
const stallBound = time.Second

// awaitParked waits for the lease of a request the scheduler parked. The
// caller's own timer ends the wait at its deadline exactly (abandon makes
// that race-free); the scheduler's sweep only cleans up after it.
func (s *System) awaitParked(ctx context.Context, st *acquireState) (*Lease, error) {
	if st.Wait != nil {
		if err := st.Wait.MayWait(st.Model); err != nil {
			return s.abandon(st, err)
		}
	}
	t := s.timer(max(st.deadline.Sub(s.now()), 0))
	defer s.timers.Put(t)
	defer t.Stop()
	select {
	case r := <-st.reply:
		return r.result()
	case <-ctx.Done():
		return s.abandon(st, ctx.Err())
	case <-t.C:
		return s.abandon(st, &AcquireError{Err: ErrBusy, RetryAfter: time.Second})
	}
}

// abandon gives up on st; if a lease raced in, it is returned to its account.
func (s *System) abandon(st *acquireState, err error) (*Lease, error) {
	if st.state.CompareAndSwap(acqPending, acqAbandoned) {
		return nil, err
	}
	for {
		r := <-st.reply // granted or failed just now: the reply is in flight or there
		if r.parked {
			continue // the notice that came first
		}
		if r.lease != nil {
			s.Release(r.lease, Outcome{Verdict: canceledVerdict})
		}
		return nil, err
	}
}

func (r acquireReply) result() (*Lease, error) {
	if r.err != nil {
		return nil, r.err
	}
	return r.lease, nil
}

func (s *System) timer(d time.Duration) *time.Timer {
	if t, ok := s.timers.Get().(*time.Timer); ok {
		t.Reset(d)
		return t
	}
	return time.NewTimer(d)
}

// Release ends the lease with its outcome. Releasing a lease twice is a no-op.
func (s *System) Release(l *Lease, out Outcome) {
	if l == nil || !l.released.CompareAndSwap(false, true) {
		return
	}
	if l.remote != nil {
		s.releaseRemote(l, out)
		return
	}
	if l.box != nil {
		// An idle account handles its release here (runHere), and the
		// view it publishes reaches an idle scheduler here too
		// (account.release): no pool worker, and no scheduler loop, woken.
		msg := &accountRelease{leaseID: l.ID, outcome: out}
		if !l.box.runHere(msg, nil) {
			l.box.send(msg, nil)
		}
		return
	}
	s.engine.Send(l.pid, &accountRelease{leaseID: l.ID, outcome: out})
}

// ReportRateLimits hands the account the usage limits an upstream answer
// to a request for model reported outside its HTTP headers (a
// codex.rate_limits event on an upstream WebSocket), received at at.
// Unknown accounts are ignored.
func (s *System) ReportRateLimits(accountID, model string, l upstream.RateLimits, at time.Time) {
	if s.remote.remote != nil && s.reportRemoteLimits(accountID, l) {
		return // goes to its owner with the lease's release
	}
	s.engine.Send(s.pool, poolForward{id: accountID, msg: &accountRateLimits{limits: l, at: at, model: model}})
}

// RefreshAccount asks the account to refresh its OAuth tokens now (single
// flight: a refresh already running is not repeated). Accounts that cannot
// refresh ignore it.
func (s *System) RefreshAccount(accountID string) {
	s.engine.Send(s.pool, poolForward{id: accountID, msg: accountRefreshDue{gen: 0}})
}

// Record queues one usage record for the recorder's next batch.
//
// A record sent while the recorder's batch timer runs does not wake the
// recorder: it waits in the mailbox for the timer's tick, or for the record
// that fills the batch, which wakes it (mailbox.sendDeferred).
func (s *System) Record(rec storage.UsageRecord) {
	p := usageRecs.Get().(*storage.UsageRecord)
	*p = rec
	s.usageBox.sendDeferred(usageRecord{rec: p}, nil)
}

// RecordErrors queues a request's failed upstream attempts as error events,
// written with the next usage batch when the Store implements
// ErrorEventWriter (and dropped otherwise). evs must not be changed after.
func (s *System) RecordErrors(evs []storage.ErrorEvent) {
	if len(evs) > 0 {
		s.engine.Send(s.usage, usageErrors{events: evs})
	}
}

// FlushUsage writes every record queued so far, waiting until done or ctx ends.
func (s *System) FlushUsage(ctx context.Context) error {
	done := make(chan struct{})
	s.engine.Send(s.usage, usageFlush{done: done})
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Views returns the latest published view of every account, in no order.
// It reads snapshots and never touches an actor's state. A reader that
// only looks should use EachView, which copies nothing.
func (s *System) Views() []View {
	// Counted first: append grows a slice this large by a quarter at a time,
	// which allocated five times the result (18 MB at 10,000 accounts,
	// BenchmarkViews).
	out := make([]View, 0, s.snapshots.len())
	s.snapshots.each(func(sn *snapshot) bool {
		if v, ok := sn.load(); ok {
			out = append(out, v)
		}
		return true
	})
	return out
}

// View returns the latest published view of one account: of its actor
// when it runs here, else (routing across instances, SetRemote) the last
// view its owner published.
func (s *System) View(id string) (View, bool) {
	sn, ok := s.snapshots.load(id)
	if !ok {
		return s.remoteView(id)
	}
	return sn.load()
}

// SchedulerStats returns the scheduler's counters (waits for its mailbox).
func (s *System) SchedulerStats(ctx context.Context) (SchedulerStats, error) {
	reply := make(chan SchedulerStats, 1)
	s.engine.Send(s.sched, schedStats{reply: reply})
	select {
	case st := <-reply:
		return st, nil
	case <-ctx.Done():
		return SchedulerStats{}, ctx.Err()
	}
}

// PolicyState is what PolicyStatus reports: the policies running and the
// accounts still waiting for a full rescore.
type PolicyState struct {
	Policy        string
	PolicyVersion uint64
	Canary        string // "" when none runs
	Rescoring     int
}

// PolicyStatus reports the scheduler's policies and rescore progress. Unlike
// SchedulerStats it does not walk the pool: it costs O(1) however large the
// pool, so it can be polled while a rescore runs.
func (s *System) PolicyStatus(ctx context.Context) (PolicyState, error) {
	reply := make(chan PolicyState, 1)
	s.engine.Send(s.sched, schedPolicyState{reply: reply})
	select {
	case st := <-reply:
		return st, nil
	case <-ctx.Done():
		return PolicyState{}, ctx.Err()
	}
}

// FlushStates writes the accounts' handover states still queued
// (Config.States), before this instance gives up its ownership leases, so
// that the next owners read the latest. Without States it does nothing.
func (s *System) FlushStates() {
	if s.states != nil {
		s.states.flush()
	}
}

// Stop stops the pool, the scheduler and the usage recorder, writing every
// queued usage record first. It waits until ctx is done at most.
func (s *System) Stop(ctx context.Context) error {
	if !s.stopped.CompareAndSwap(false, true) {
		return nil
	}
	s.stopWSPools(ctx)
	defer s.stall.close()
	// The account actors first (they are not the pool's hollywood children),
	// then their workers.
	accounts := make(chan struct{})
	s.engine.Send(s.pool, poolStopAll{done: accounts})
	select {
	case <-accounts:
	case <-ctx.Done():
		return ctx.Err()
	}
	s.boxes.close()
	if s.states != nil {
		s.states.close() // the accounts' last states, then the writer
	}
	for _, pid := range []*actor.PID{s.pool, s.sched, s.usage} {
		select {
		case <-s.engine.Poison(pid).Done():
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
