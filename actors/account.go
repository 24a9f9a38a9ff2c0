package actors

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/internal/ratelog"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Backoff bounds for transient and rate failures: 30 s doubling to 10 min.
const (
	backoffBase = 30 * time.Second
	backoffMax  = 10 * time.Minute
	ewmaAlpha   = 0.1
)

// accountConfig is what an account actor starts with, and its producer
// (mailProducer). The actor keeps its account and transport current
// (configure, setTransport), so that a restart after a panic starts from
// the latest ones; one copy serves the actor and its mailbox (at 10,000
// accounts a copy each was 7 MB). What every account of a pool has alike
// is one accountShared, which the pool holds.
type accountConfig struct {
	*accountShared
	account   storage.Account
	transport upstream.Transport
	// snapshot is what readers (admin, metrics) see of the account,
	// written only by the actor. It is held here, not apart: the config
	// is 416 bytes with it, a size class, and a snapshot of its own was 24
	// bytes more an account.
	snapshot snapshot
	// fence is the account's ownership lease (Config.Fenced; fence.go);
	// nil: it grants whenever it has capacity.
	fence *Fence
	// last is the handler produce made before, on the mailbox's turn (a
	// restart takes over from it); nil before the first.
	last *account
}

// accountShared is the part of accountConfig that is the same for every
// account of a pool: one for the pool rather than 64 bytes in each
// account's (at 10,000 accounts, with the producer in accountConfig rather
// than a closure, 0.6 MB of live heap).
type accountShared struct {
	factory   TransportFactory // rebuilds the transport after a token refresh
	refresh   *refresher       // nil: no token refresh
	scheduler *mailbox         // the scheduler's, sent to directly (no registry lookup)
	log       *slog.Logger
	now       func() time.Time
	// probeEvery is how often a quota cooldown is probed (probe.go); <= 0: never.
	probeEvery time.Duration
	// stateLog rate-limits the state-change lines of all accounts
	// (logState); nil: they are not logged.
	stateLog *ratelog.Event
	// states saves and loads the state handed over between owners
	// (Config.States; handover.go); nil: none is.
	states *states
	// names are the base URLs and model and tag lists the accounts share
	// (pool.put, configure); nil: each account keeps its own copies.
	names *interner
}

// account is the actor that owns one upstream account: its in-flight count
// and limit, cooldown and health. It is the only place a lease is granted, so
// the limit holds however stale the scheduler's view is.
type account struct {
	cfg *accountConfig // shared with the mailbox's producer (newAccount)
	// view is the account's view: the one it published last, which the
	// scheduler and readers share and nobody writes, or, once a change
	// began (edit), next's. Its InFlight and Requests are those of its
	// publish; the current counts are inFlight and requests.
	view *View
	// next carries the view being changed to the scheduler when it is
	// published (publish); nil while view is the published one. At 10,000
	// accounts a View of the account's own beside the published one was
	// 6 MB of live heap.
	next      *schedView
	inFlight  int    // leases held now (View.InFlight)
	requests  uint64 // leases granted since start (View.Requests)
	transport upstream.Transport
	// leases are the outstanding leases, in no order: a few at a time, so
	// a slice, which costs 48 bytes a lease, where a map's first insert
	// allocates 416 (a group of 8) that stay after the leases end.
	leases    []heldLease
	nextLease uint64
	answered  uint64 // grant requests handled (schedView.answered)
	backoff   int    // consecutive backoff steps for transient/rate failures
	coolGen   uint64 // generation of the pending cooldown timer
	coolTimer *time.Timer
	// box is its own mailbox, handed to the scheduler and in leases, which
	// holds its PID and engine (pid, eng); nil until Started. At 10,000
	// accounts a copy of those two pointers each was 320 KB: the struct
	// fell into the 320-byte size class rather than the 288.
	box     *mailbox
	drainTo *actor.PID   // the pool, told when a draining account holds no lease
	saved   *handoverKey // what the last saved state was saved at (handover.go); nil: nothing saved yet

	// gos are the account's goroutines and its token refresh state; nil
	// until the first goroutine or refresh timer (goState). Most accounts
	// never start one: at 10,000 accounts these 96 bytes in each actor
	// took it from the 208-byte size class to the 288.
	gos *accountGos

	windows map[string]*windowState // usage windows by name (windows.go)

	// Quota probes (probe.go).
	lastModel  string // model of the last lease, asked for by probes
	probeTimer *time.Timer

	// The flags, together: at 10,000 accounts each word of padding is 80 KB.
	draining      bool // moving to another instance: no grants (fence.go)
	restoring     bool // reading the state its previous owner saved: no grants (handover.go)
	refreshing    bool // a token refresh runs
	authPending   bool // the running refresh was caused by a 401
	authRefreshed bool // the current tokens came from a refresh caused by a 401
	probing       bool // a quota probe is in flight
}

// accountGos is what an account holds for the goroutines it starts (token
// refresh, handover, quota probes) and its token refresh (refresh.go).
type accountGos struct {
	ctx          context.Context // the goroutines run under it (goContext); nil until the first
	cancel       context.CancelFunc
	goroutines   sync.WaitGroup
	refreshGen   uint64 // generation of the pending refresh timer
	refreshTimer *time.Timer
	refreshFails int
	refreshes    int
	lastRefresh  time.Time
}

// goState returns a's accountGos, made on first use.
func (a *account) goState() *accountGos {
	if a.gos == nil {
		a.gos = &accountGos{}
	}
	return a.gos
}

// refreshGen returns the generation of a's pending refresh timer (0: it
// never set one).
func (a *account) refreshGen() uint64 {
	if a.gos == nil {
		return 0
	}
	return a.gos.refreshGen
}

// produce makes the account's actor (mailProducer). An actor restarted
// after a panic (mailbox.recovered) takes over the leases its predecessor
// granted and the counters the scheduler reads (the view's version, the
// grants answered): otherwise the scheduler would take its views for stale
// ones and count the old leases as held forever, and the account would
// never be granted again.
func (cfg *accountConfig) produce() mailHandler {
	a := &account{cfg: cfg, transport: cfg.transport, next: new(schedView)}
	a.view = &a.next.view
	a.configure(cfg.account)
	a.view.EWMASuccess = 1
	if last := cfg.last; last != nil {
		a.view.Version = last.view.Version
		a.answered, a.requests = last.answered, last.requests
		a.leases, a.inFlight, a.nextLease = last.leases, last.inFlight, last.nextLease
	}
	cfg.last = a
	return a
}

func (a *account) configure(acc storage.Account) {
	a.cfg.account = acc
	v := a.edit()
	v.ID, v.Name, v.Provider, v.Group, v.Priority = acc.ID, acc.Name, acc.Provider, acc.Group, acc.Priority
	v.Models, v.Tags = nil, nil // empty: nil, as a copy of an empty list was
	if len(acc.Models) > 0 {
		v.Models = a.cfg.names.list(acc.Models)
	}
	if len(acc.Tags) > 0 {
		v.Tags = a.cfg.names.list(acc.Tags)
	}
	v.MaxInFlight = max(acc.MaxConcurrency, 1)
	v.ConfigGen++
	switch {
	case acc.Disabled:
		v.Status = StatusDisabled
	case v.Status == StatusDisabled:
		v.Status = StatusActive
	}
}

// receive handles account messages, on a worker of the system's mailPool
// (mailpool.go). A request's two messages are handled here, the rest in
// receiveRare, which keeps this frame small.
func (a *account) receive(c *mailCtx, msg any) {
	switch m := msg.(type) {
	case accountGrant:
		a.grant(c, m.req)
	case *accountRelease:
		a.release(c, m.leaseID, &m.outcome)
	default:
		a.receiveRare(c, m)
	}
}

// receiveRare handles the account's other messages.
//
//go:noinline
func (a *account) receiveRare(c *mailCtx, msg any) {
	switch m := msg.(type) {
	case actor.Started:
		a.started(c)
	case actor.Stopped:
		a.stopped()
	case *accountUpdate:
		a.update(c, m)
	case accountRefreshDue:
		if m.gen == 0 || m.gen == a.refreshGen() {
			a.startRefresh(c)
		}
	case *accountRefreshed:
		a.refreshed(c, m)
	case *accountRateLimits:
		a.rateLimits(m.limits, m.at, m.model)
		a.publish(c)
	case accountProbe:
		a.probe(m)
	case accountProbed:
		a.probed(c, m)
	case accountOwned, accountDrain, accountRestore:
		a.receiveFence(c, m)
	case accountConfigAsk:
		m.reply <- a.cfg.account
	case accountAdopt:
		a.adopt(c, m)
	case accountRepublish:
		a.publish(c) // a new version: the restarted scheduler indexes it afresh
	case accountCooldownEnd:
		if m.gen == a.coolGen && a.view.Status == StatusCooling {
			reason := a.view.CooldownReason
			v := a.edit()
			v.Status = StatusActive
			v.CooldownUntil = time.Time{}
			v.CooldownReason = ""
			a.publish(c)
			if ok, held := a.cfg.stateLog.Take(context.Background(), a.cfg.log, slog.LevelInfo); ok {
				a.cfg.log.LogAttrs(context.Background(), slog.LevelInfo, "account cooldown over",
					slog.String("account", a.view.Name), slog.String("class", reason), slog.Int64("suppressed", held))
			}
		}
	}
}

func (a *account) started(c *mailCtx) {
	a.box = c.box
	a.setTransport(a.transport)
	a.scheduleRefresh()
	if f := a.cfg.fence; f != nil && !f.Holds(a.cfg.now()) {
		a.edit().Moving = true // taken over and adopting leases (fleet.Owners): not granting yet
	}
	a.startRestore()
	a.publish(c)
}

// pid returns the account's PID; nil before Started.
func (a *account) pid() *actor.PID {
	if a.box == nil {
		return nil
	}
	return a.box.ctx.pid
}

// eng returns the account's engine; nil before Started.
func (a *account) eng() *actor.Engine {
	if a.box == nil {
		return nil
	}
	return a.box.ctx.engine
}

// goContext returns the context the account's goroutines (refresh,
// handover, quota probes) run under, cancelled when the actor stops. It is made on first
// use: most accounts never start one, and at 10,000 accounts a context
// each is a megabyte.
func (a *account) goContext() context.Context {
	g := a.goState()
	if g.ctx == nil {
		g.ctx, g.cancel = context.WithCancel(context.Background())
	}
	return g.ctx
}

func (a *account) stopped() {
	if a.coolTimer != nil {
		a.coolTimer.Stop()
	}
	if g := a.gos; g != nil {
		if g.refreshTimer != nil {
			g.refreshTimer.Stop()
		}
		if g.cancel != nil {
			g.cancel()
		}
		g.goroutines.Wait()
	}
	a.stopProbes()
}

func (a *account) update(c *mailCtx, m *accountUpdate) {
	a.configure(m.account)
	if m.transport != nil {
		a.setTransport(m.transport)
	}
	if !a.refreshing {
		a.scheduleRefresh()
	}
	a.publish(c)
}

// grant grants req a lease, or refuses it to the scheduler. A granted lease
// is not published: the scheduler counted it when it sent the grant, and the
// account's next view covers it (schedView.answered), so the hot path costs
// the caller one hop and no allocation but the Lease. Readers see the new
// counters at once (snapshot.counters).
func (a *account) grant(c *mailCtx, req *acquireState) {
	a.answered++
	now := a.cfg.now()
	woke := a.view.Status == StatusCooling && !now.Before(a.view.CooldownUntil)
	if woke {
		v := a.edit()
		v.Status = StatusActive
		v.CooldownUntil = time.Time{}
		v.CooldownReason = ""
	}
	if a.unfenced(c, now) || a.inFlight >= a.view.MaxInFlight || !a.view.Usable(now) || (req.limit > 0 && a.inFlight >= req.limit) || a.view.ModelCooling(req.Model, now) {
		a.refuse(c, req)
		return
	}
	if !req.state.CompareAndSwap(acqPending, acqGranted) {
		// The caller gave up; nothing was granted. Tell the scheduler the real
		// state so its optimistic count is corrected.
		a.publish(c)
		return
	}
	if req.Model != anyModel {
		a.lastModel = req.Model
	}
	a.nextLease++
	id := a.nextLease
	a.leases = append(a.leases, heldLease{id: id, granted: now, model: req.Model})
	a.inFlight++
	a.requests++
	switch {
	case woke:
		// The status changed, which the scheduler must judge. Publish
		// before replying: Send may wake the scheduler's mailbox
		// goroutine, and the Go runtime runs the goroutine readied last
		// first (runnext), so replying last lets the caller run first.
		a.publish(c)
	default:
		a.cfg.snapshot.counters(a.inFlight, a.requests)
	}
	// The lease is req's own (acquireState.lease), its Decision already
	// written by the pick; req is no longer pending, so nothing else writes it.
	l := &req.lease
	l.ID, l.AccountID, l.Name, l.Provider = id, a.view.ID, a.view.Name, a.view.Provider
	l.Transport, l.Granted, l.pid, l.box = a.transport, now, a.pid(), a.box
	req.reply <- acquireReply{lease: l}
}

func (a *account) release(c *mailCtx, id uint64, out *Outcome) {
	i := 0
	for i < len(a.leases) && a.leases[i].id != id {
		i++
	}
	if i == len(a.leases) {
		return // unknown or already released
	}
	held, last := a.leases[i], len(a.leases)-1
	a.leases[i] = a.leases[last]
	a.leases[last] = heldLease{} // keeps no model string alive
	a.leases = a.leases[:last]
	a.inFlight--
	a.observe(c, out, held)
	a.publishInline(c)
	a.drained(c)
}

// heldLease is what the account remembers of a lease it granted.
type heldLease struct {
	id      uint64
	granted time.Time
	model   string // the model the lease was asked for
}

// observe folds an outcome into the account's health and cooldown state.
func (a *account) observe(c *mailCtx, out *Outcome, held heldLease) {
	v := a.edit() // the release publishes
	now := a.cfg.now()
	cl := out.Verdict.Class
	if cl == upstream.ClassQuota && v.ModelCooling(held.model, now) {
		// The limit of the model's family ran out (its report came first,
		// with the answer's headers): that family rests, not the account.
		return
	}
	switch {
	case cl == upstream.ClassNone:
		v.Successes++
		v.SuccessStreak++
		v.FailureStreak = 0
		a.backoff = 0
		v.EWMASuccess += ewmaAlpha * (1 - v.EWMASuccess)
		a.authRefreshed = false
		v.EWMALatency = ewmaDur(v.EWMALatency, out.Latency)
		if out.TTFT > 0 {
			v.EWMATTFT = ewmaDur(v.EWMATTFT, out.TTFT)
		}
	case cl.AccountFault():
		v.Failures++
		v.FailureStreak++
		v.SuccessStreak = 0
		v.LastFailures = withFailure(v.LastFailures, cl, now, out.Timeout)
		v.EWMASuccess += ewmaAlpha * (0 - v.EWMASuccess)
		before, until := v.Status, v.CooldownUntil
		if cl == upstream.ClassAuth && a.authFailed(c, now, held.granted) {
			a.logState(out, before, until, now)
			return // resting while the tokens are refreshed
		}
		a.penalize(cl, out.Verdict.RetryAfter, now)
		a.logState(out, before, until, now)
	}
	// ClassRequest and ClassCanceled say nothing about the account.
}

// penalize applies the failure class's effect on the account (DESIGN.md, failure classes).
func (a *account) penalize(cl upstream.Class, hint time.Duration, now time.Time) {
	switch cl {
	case upstream.ClassBanned:
		a.edit().Status = StatusBanned
		return
	case upstream.ClassAuth:
		// Not refreshable, or refused again right after a refresh: out
		// until the operator gives it new credentials.
		a.edit().Status = StatusUnauthorized
		return
	case upstream.ClassQuota:
		d := hint
		if d <= 0 {
			d = time.Hour
		}
		a.coolDown(cl, d, now)
	case upstream.ClassRate, upstream.ClassTransient:
		if cl == upstream.ClassTransient && a.view.FailureStreak < 3 {
			return // isolated transient failures only cost health, not a rest
		}
		// 30 s, 60 s, 120 s … capped at 10 min; a success resets the step.
		d := min(backoffBase<<min(a.backoff, 5), backoffMax)
		a.backoff++
		if hint > d {
			d = hint // Retry-After never shortens a longer backoff, and may lengthen it
		}
		a.coolDown(cl, d, now)
	}
}

func (a *account) coolDown(cl upstream.Class, d time.Duration, now time.Time) {
	until := now.Add(d)
	if a.view.Status == StatusCooling && a.view.CooldownUntil.After(until) {
		return
	}
	if a.view.Status != StatusActive && a.view.Status != StatusCooling {
		return
	}
	v := a.edit()
	v.Status = StatusCooling
	v.CooldownUntil = until
	v.CooldownReason = cl.String()
	a.coolGen++
	gen, pid, eng := a.coolGen, a.pid(), a.eng()
	if a.coolTimer != nil {
		a.coolTimer.Stop()
	}
	a.coolTimer = time.AfterFunc(d, func() { eng.Send(pid, accountCooldownEnd{gen: gen}) })
	if cl == upstream.ClassQuota {
		a.armProbe() // the upstream's evidence may end it sooner
	}
}

func ewmaDur(old, x time.Duration) time.Duration {
	if old == 0 {
		return x
	}
	return old + time.Duration(ewmaAlpha*float64(x-old))
}

// edit returns the account's view to change: the one being changed since
// the last publish, or a copy of the published one, which the next publish
// sends. The published view is never written: the scheduler and readers
// keep it.
func (a *account) edit() *View {
	if a.next == nil {
		a.next = &schedView{view: *a.view}
		a.view = &a.next.view
	}
	return a.view
}

// seal ends the change begun by edit: the view gets the current counters
// and a new version, and is not written again. It returns the message
// carrying it.
func (a *account) seal() *schedView {
	v := a.edit()
	v.InFlight, v.Requests = a.inFlight, a.requests
	v.Version++
	m := a.next
	a.next = nil
	return m
}

// publish bumps the version and hands the new view to the scheduler and readers.
func (a *account) publish(c *mailCtx) { a.publishVia(c, false) }

// publishInline is publish for a release: when the scheduler is idle its
// turn is taken on this goroutine (mailbox.sendInline) for the view, so the
// release, often handled on the releasing caller's goroutine
// (System.Release), wakes no scheduler loop. A scheduler that is busy, or
// borrowed by this goroutine (a grant it handed this account inline), gets
// the view queued, as publish sends it.
func (a *account) publishInline(c *mailCtx) { a.publishVia(c, true) }

func (a *account) publishVia(c *mailCtx, inline bool) {
	// One allocation (edit's) serves the account, the scheduler and the
	// readers: the view is never written after the seal. Enqueue for the
	// scheduler before readers can see the snapshot, so a reader that saw
	// it and then asks the scheduler finds it applied (inline: applied).
	m := a.seal()
	m.box, m.answered = a.box, a.answered
	if inline {
		a.cfg.scheduler.sendInline(m, a.pid())
	} else {
		a.cfg.scheduler.send(m, a.pid())
	}
	a.cfg.snapshot.publish(&m.view)
	a.saveState()
}

// refuse returns req to the scheduler with the account's view, which the
// scheduler installs; readers keep the published one.
func (a *account) refuse(c *mailCtx, req *acquireState) {
	m := a.seal()
	a.cfg.scheduler.send(&schedRefused{req: req, view: &m.view, answered: a.answered, box: a.box}, a.pid())
}

// Budget of the accounts' state-change lines (logState): a mass cooldown of
// a large pool leaves stateLogBurst lines per stateLogWindow, the next one
// saying how many were suppressed.
const (
	stateLogBurst  = 20
	stateLogWindow = 10 * time.Second
)

// logState logs what outcome out did to the account, whose status and
// cooldown end were before and until: a cooldown begun or lengthened
// (WARN), the account out of the pool, banned or unauthorized (ERROR).
// Each line names the request, its status and class.
func (a *account) logState(out *Outcome, before Status, until, now time.Time) {
	v := a.view
	level, msg := slog.LevelWarn, "account cooling down"
	switch {
	case v.Status == StatusCooling && (before != StatusCooling || v.CooldownUntil.After(until)):
	case v.Status != before && (v.Status == StatusBanned || v.Status == StatusUnauthorized):
		level, msg = slog.LevelError, "account out of the pool"
	default:
		return
	}
	ctx := context.Background()
	ok, held := a.cfg.stateLog.Take(ctx, a.cfg.log, level)
	if !ok {
		return
	}
	attrs := []slog.Attr{slog.String("account", v.Name), slog.String("state", v.Status.String()),
		slog.String("class", out.Verdict.Class.String()), slog.Int("status", out.Status), slog.String("request_id", out.RequestID)}
	if v.Status == StatusCooling {
		attrs = append(attrs, slog.Duration("for", v.CooldownUntil.Sub(now).Round(time.Second)),
			slog.Time("until", v.CooldownUntil.UTC()))
	}
	a.cfg.log.LogAttrs(ctx, level, msg, append(attrs, slog.Int64("suppressed", held))...)
}
