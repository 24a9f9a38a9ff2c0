package billing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// Channel is the cache pub/sub channel on which changes of prices, price
// groups and users are announced; every Gate drops its cached users and
// reloads its prices on a message.
const Channel = "billing"

// Store is what a Gate reads (storage.Store has it).
type Store interface {
	GetUser(ctx context.Context, idNameOrEmail string) (storage.User, error)
	Balance(ctx context.Context, userID string) (int64, error)
	ListPrices(ctx context.Context) ([]storage.Price, error)
	ListPriceGroups(ctx context.Context) ([]storage.PriceGroup, error)
}

// Options configure a Gate. The zero value is valid.
type Options struct {
	// OutputEstimate is the output tokens a request is assumed to produce
	// when it does not say (no max_tokens); default DefaultOutputEstimate.
	OutputEstimate int64
	// UserTTL is how long a user read from storage is trusted; default
	// 10 s (a change announced on Channel applies at once).
	UserTTL time.Duration
	// HoldWindow is the length of one window of the hold and concurrency
	// counters in the cache. Each instance moves its requests in flight
	// into every new window (Check), so what an instance that died held
	// frees itself at the next turn; default DefaultHoldWindow.
	HoldWindow time.Duration
	// HoldLife is the longest a request's hold and slot are moved into new
	// windows: a ticket never finished, or finished and never committed
	// (its record lost), is dropped then; default DefaultHoldLife.
	HoldLife time.Duration
	Logger   *slog.Logger
	Now      func() time.Time // default time.Now
}

// Defaults of Options.
const (
	DefaultOutputEstimate = 1024
	DefaultHoldWindow     = time.Minute
	DefaultHoldLife       = time.Hour
)

// Gate admits users' requests against their limits and balance, prices
// them from their usage, and holds what requests in flight may cost until
// their charges are stored (docs/billing.md). It is safe for concurrent use.
//
// The holds live in the cache (Redis: shared by every instance; memory:
// this process): per user, the sum of the estimates of the requests
// admitted and not yet charged. A request is admitted only when the
// balance covers every hold including its own, so concurrent requests
// overdraw only by what their real cost exceeds their estimate.
type Gate struct {
	store Store
	cache storage.Cache
	opts  Options
	book  atomic.Pointer[book]

	mu      sync.Mutex
	users   map[string]cachedUser
	pending map[string]*Ticket // request id → ticket whose charge is not stored yet
	swept   time.Time

	// instance names this gate's marker counters (markerKey): random, one
	// per process.
	instance string
	// counting is held shared by every count of a ticket's hold or slot
	// (the cache op and the ticket's state) and exclusively by a
	// re-assertion, which so sees each live ticket's state as counted.
	counting sync.RWMutex
	marker   atomic.Pointer[marker] // the marker key of the latest window counted in
	liveMu   sync.Mutex
	live     map[*Ticket]struct{} // tickets with a hold or a slot counted in the cache
}

type cachedUser struct {
	u  storage.User
	at time.Time
}

// book is one snapshot of prices and group multipliers.
type book struct {
	prices map[string]storage.Price
	groups map[string]int64
}

// New returns a Gate over store and cache (nil: no holds, limits or
// concurrency across requests; tests). Call Reload before use.
func New(store Store, cache storage.Cache, opts Options) *Gate {
	if opts.OutputEstimate <= 0 {
		opts.OutputEstimate = DefaultOutputEstimate
	}
	if opts.UserTTL <= 0 {
		opts.UserTTL = 10 * time.Second
	}
	if opts.HoldWindow <= 0 {
		opts.HoldWindow = DefaultHoldWindow
	}
	if opts.HoldLife <= 0 {
		opts.HoldLife = DefaultHoldLife
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (Go 1.24)
	g := &Gate{store: store, cache: cache, opts: opts, users: map[string]cachedUser{}, pending: map[string]*Ticket{},
		instance: hex.EncodeToString(id[:]), live: map[*Ticket]struct{}{}}
	g.book.Store(&book{prices: map[string]storage.Price{}, groups: map[string]int64{}})
	return g
}

// SetCache sets the cache of the holds and limits, before the gate admits
// a request (the cache opens after the usage journal, which needs the gate).
func (g *Gate) SetCache(c storage.Cache) { g.cache = c }

// Reload reads prices and group multipliers again and drops cached users.
// On an error the previous prices stay.
func (g *Gate) Reload(ctx context.Context) error {
	g.mu.Lock()
	clear(g.users)
	g.mu.Unlock()
	prices, err := g.store.ListPrices(ctx)
	if err != nil {
		return fmt.Errorf("billing: reload prices: %w", err)
	}
	groups, err := g.store.ListPriceGroups(ctx)
	if err != nil {
		return fmt.Errorf("billing: reload price groups: %w", err)
	}
	b := &book{prices: make(map[string]storage.Price, len(prices)), groups: make(map[string]int64, len(groups))}
	for _, p := range prices {
		b.prices[p.Model] = p
	}
	for _, gr := range groups {
		b.groups[gr.Group] = gr.Multiplier
	}
	g.book.Store(b)
	return nil
}

// Price returns the price of model and whether it has one.
func (g *Gate) Price(model string) (storage.Price, bool) {
	p, ok := g.book.Load().prices[model]
	return p, ok
}

// Multiplier returns group's multiplier in parts per million (UnitMultiplier
// when it has none).
func (g *Gate) Multiplier(group string) int64 {
	if m, ok := g.book.Load().groups[group]; ok && m > 0 {
		return m
	}
	return UnitMultiplier
}

// User returns the user with id, cached for Options.UserTTL.
func (g *Gate) User(ctx context.Context, id string) (storage.User, error) {
	now := g.opts.Now()
	g.mu.Lock()
	c, ok := g.users[id]
	g.mu.Unlock()
	if ok && now.Sub(c.at) < g.opts.UserTTL {
		return c.u, nil
	}
	u, err := g.store.GetUser(ctx, id)
	if err != nil {
		return storage.User{}, err
	}
	g.mu.Lock()
	g.users[id] = cachedUser{u: u, at: now}
	g.mu.Unlock()
	return u, nil
}

// Usable reports whether user u may use model: its allowlist has it (or is
// empty) and the model has a price.
func (g *Gate) Usable(u *storage.User, model string) bool {
	if len(u.Models) > 0 && !slices.Contains(u.Models, model) {
		return false
	}
	_, ok := g.Price(model)
	return ok
}

// RefusalKind says why a request was refused.
type RefusalKind int

// Refusals, with the status the gateway answers them with.
const (
	RefusedUnknown     RefusalKind = iota + 1 // the key's user does not exist: 401
	RefusedDisabled                           // the user is disabled: 401
	RefusedModel                              // not in the user's allowlist: 403
	RefusedUnpriced                           // the model has no price: 403
	RefusedRPM                                // the user's requests per minute: 429
	RefusedConcurrency                        // the user's requests in flight: 429
	RefusedBalance                            // the balance cannot cover the estimate: 429 insufficient_quota (OpenAI), 402 billing_error (Anthropic)
	RefusedUnavailable                        // storage cannot tell the balance: 503
)

// Refusal is why Admit refused a request.
type Refusal struct {
	Kind       RefusalKind
	Limit      int64         // RefusedRPM, RefusedConcurrency: the limit
	RetryAfter time.Duration // RefusedRPM: until the minute ends
	Err        error         // RefusedUnavailable, RefusedUnknown: the storage error (never shown to clients)
}

// Error describes the refusal (for logs).
func (r *Refusal) Error() string {
	return fmt.Sprintf("billing: request refused (kind %d): %v", r.Kind, r.Err)
}

// Request is what Admit needs of a request.
type Request struct {
	ID     string // the request id its usage record will have
	UserID string
	Model  string // as the client named it (prices are per client model name)
	Input  int64  // estimated input tokens
	// MaxOutput is the request's output cap (max_tokens), in tokens; a cap
	// below Options.OutputEstimate, or none (<= 0), counts as
	// Options.OutputEstimate: an upstream may not honour it (a codex
	// account drops it), so it cannot lower the estimate.
	MaxOutput int64
	// Choices is how many answers the request asks for (Chat's n), each up
	// to MaxOutput: the output estimated is Choices × MaxOutput (at most
	// MaxOutputAllowance). <= 0: 1.
	Choices int64
}

// MaxOutputAllowance caps the output tokens a request's estimate counts
// (Request.Choices × Request.MaxOutput): far above any model's output, and
// low enough that at any real price the estimate stays far inside int64
// (Cost clamps the rest).
const MaxOutputAllowance = 1 << 40

// outputAllowance is the output tokens r's estimate counts: Choices × the
// larger of MaxOutput and outputEstimate, at most MaxOutputAllowance.
//
// A cap below outputEstimate does not lower the estimate: the ChatGPT
// backend refuses max_output_tokens, so a codex account serves the request
// without its cap (upstream.CodexAccepts), and the account is picked only
// after admission (a routing policy, a failover or another instance may
// pick it). Trusting the cap let a user with 100 micro-units in flight hold
// 74 each for requests that cost more (docs/billing.md, "Which caps hold").
func outputAllowance(r Request, outputEstimate int64) int64 {
	out, n := max(r.MaxOutput, outputEstimate), max(r.Choices, 1)
	if out > MaxOutputAllowance/n {
		return MaxOutputAllowance
	}
	return out * n
}

// Ticket is an admitted request's claim: its estimate held, its slot in
// the user's concurrency. Finish prices it; Committed releases its hold.
type Ticket struct {
	id       string
	user     storage.User
	price    storage.Price
	mult     int64
	estimate int64 // the hold counted in the cache for it (0: none)
	// slot is the window its hold and slot are counted in: set at
	// admission, then moved by reassert (with Gate.counting held
	// exclusively; read it with Gate.counting held).
	slot     int64
	conc     bool // it holds a concurrency slot
	released atomic.Bool
	at       time.Time
}

// Estimate is the amount held for the request, in micro-units.
func (t *Ticket) Estimate() int64 { return t.estimate }

func holdKey(user string, slot int64) string {
	return "bill:hold:" + user + ":" + strconv.FormatInt(slot, 10)
}

func concKey(user string, slot int64) string {
	return "bill:conc:" + user + ":" + strconv.FormatInt(slot, 10)
}

// markerKey is the counter that says the cache still has the holds and
// slots instance counted in window slot: set to 1 by the instance's first
// count in the window, it is gone when the cache has lost them (Redis
// restarted empty).
func markerKey(instance string, slot int64) string {
	return "bill:live:" + instance + ":" + strconv.FormatInt(slot, 10)
}

// marker is a window's marker key, kept so that a count does not build it.
type marker struct {
	slot int64
	key  string
}

// markerOf returns this instance's marker key of window slot.
func (g *Gate) markerOf(slot int64) string {
	if m := g.marker.Load(); m != nil && m.slot == slot {
		return m.key
	}
	m := &marker{slot: slot, key: markerKey(g.instance, slot)}
	g.marker.Store(m)
	return m.key
}

// Admit checks request r of a user before it goes upstream: the user exists
// and is enabled, may use the model and the model has a price, its RPM and
// concurrency limits, then holds the request's estimate (the price of its
// estimated input and of Choices × the larger of max_tokens and
// Options.OutputEstimate of output: outputAllowance)
// and admits it when the balance covers every hold of the user including
// this one. The hold is counted before the balance is read, so a charge
// stored meanwhile (whose hold is dropped only after it is stored) is never
// missed by both. A cache that fails lets limits through (they are a guard)
// and counts the hold as this request's alone; a balance storage cannot
// read refuses (RefusedUnavailable). On admission the caller must pass the
// ticket to Finish exactly once.
func (g *Gate) Admit(ctx context.Context, r Request) (*Ticket, *Refusal) {
	u, err := g.User(ctx, r.UserID)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil, &Refusal{Kind: RefusedUnknown, Err: err}
	case err != nil:
		return nil, &Refusal{Kind: RefusedUnavailable, Err: err}
	case u.Disabled:
		return nil, &Refusal{Kind: RefusedDisabled}
	case len(u.Models) > 0 && !slices.Contains(u.Models, r.Model):
		return nil, &Refusal{Kind: RefusedModel}
	}
	p, ok := g.Price(r.Model)
	if !ok {
		return nil, &Refusal{Kind: RefusedUnpriced}
	}
	mult := g.Multiplier(u.Group)
	out := outputAllowance(r, g.opts.OutputEstimate)
	now := g.opts.Now()
	// t.estimate is what the cache holds for t: nothing until the hold is
	// counted (a ticket live for its slot alone must not be counted with
	// a hold by reassert).
	est := Cost(p, mult, Tokens{Input: r.Input, Output: out})
	t := &Ticket{id: r.ID, user: u, price: p, mult: mult, slot: g.window(now), at: now}
	if g.cache != nil {
		if ref := g.limits(ctx, t, now); ref != nil {
			return nil, ref
		}
	}
	held := est
	if g.cache == nil {
		t.estimate = est
	} else if est > 0 {
		var ops [2]storage.CacheOp
		err := g.count(ctx, t, ops[:], func(slot int64) {
			ops[1] = storage.CacheOp{Kind: storage.CacheIncr, Key: holdKey(u.ID, slot), N: est, TTL: g.opts.HoldWindow}
		}, func() {
			if ops[1].Err == nil && !ops[1].Skipped {
				t.estimate = est
				g.track(t)
				held = max(ops[1].Total, held)
			}
		})
		if err == nil {
			err = ops[1].Err
		}
		if err != nil {
			g.opts.Logger.Warn("billing: hold not counted in the cache; this request's estimate alone is held", "err", err)
		}
	}
	bal, err := g.store.Balance(ctx, u.ID)
	if err != nil || bal < held {
		g.release(t)
		if err != nil {
			return nil, &Refusal{Kind: RefusedUnavailable, Err: err}
		}
		return nil, &Refusal{Kind: RefusedBalance}
	}
	return t, nil
}

// limits counts t against its user's RPM and concurrency limits.
func (g *Gate) limits(ctx context.Context, t *Ticket, now time.Time) *Refusal {
	var buf [3]storage.CacheOp
	ops := buf[:1] // ops[0]: the marker (count)
	if t.user.RPM > 0 {
		ops = append(ops, storage.CacheOp{Kind: storage.CacheIncr, Key: "bill:rpm:" + t.user.ID, N: 1, TTL: time.Minute, Limit: t.user.RPM})
	}
	conc := -1
	if t.user.MaxConcurrency > 0 {
		conc = len(ops)
		ops = append(ops, storage.CacheOp{})
	}
	if len(ops) == 1 {
		return nil
	}
	err := g.count(ctx, t, ops, func(slot int64) {
		if conc >= 0 {
			ops[conc] = storage.CacheOp{Kind: storage.CacheIncr, Key: concKey(t.user.ID, slot), N: 1, TTL: g.opts.HoldWindow, Limit: t.user.MaxConcurrency}
		}
	}, func() {
		if conc >= 0 && ops[conc].Err == nil && !ops[conc].Skipped {
			t.conc = true
			g.track(t)
		}
	})
	if err != nil {
		g.opts.Logger.Warn("billing: user limit counter unavailable; request admitted", "err", err)
	}
	for i := range ops[1:] {
		op := &ops[1+i]
		if op.Err != nil && err == nil {
			g.opts.Logger.Warn("billing: user limit counter unavailable; request admitted", "err", op.Err)
		}
		if !op.Over {
			continue
		}
		g.releaseConc(t)
		if 1+i != conc {
			return &Refusal{Kind: RefusedRPM, Limit: t.user.RPM, RetryAfter: time.Minute - time.Duration(now.UnixNano()%int64(time.Minute))}
		}
		return &Refusal{Kind: RefusedConcurrency, Limit: t.user.MaxConcurrency}
	}
	return nil
}

// Finish prices the request of ticket t from its usage record rec — the
// same token counts the record stores — and sets rec.UserID and rec.Cost;
// storing rec charges the cost (storage.Usage.InsertUsage). It frees the
// request's concurrency slot and sets its hold from the estimate to the
// cost, kept until Committed sees rec stored (or freed now when the
// request costs nothing). Call it once per
// ticket, before the record is handed to the recorder.
func (g *Gate) Finish(t *Ticket, rec *storage.UsageRecord) {
	rec.UserID = t.user.ID
	rec.Cost = Cost(t.price, t.mult, Tokens{Input: rec.InputTokens, Cached: rec.CachedTokens, CacheWrite: rec.CacheWriteTokens, Output: rec.OutputTokens})
	g.releaseConc(t)
	if rec.Cost == 0 {
		g.release(t)
		return
	}
	// From now until its charge is stored the request holds its exact
	// cost, not its estimate: a request already answered never overdraws.
	if d := rec.Cost - t.estimate; d != 0 && g.cache != nil && !t.released.Load() {
		if err := g.adjust(t, d); err != nil {
			g.opts.Logger.Warn("billing: hold not set to the request's cost; its estimate stays held", "err", err)
		}
	}
	now := g.opts.Now()
	g.mu.Lock()
	g.pending[rec.RequestID] = t
	var stale []*Ticket
	if now.Sub(g.swept) > g.opts.HoldLife {
		// A record the recorder dropped is never committed: reassert
		// stopped moving its hold after HoldLife; forget it here.
		g.swept = now
		for id, p := range g.pending {
			if now.Sub(p.at) > 2*g.opts.HoldLife {
				delete(g.pending, id)
				stale = append(stale, p)
			}
		}
	}
	g.mu.Unlock()
	for _, p := range stale {
		p.released.Store(true)
	}
}

// Committed releases the holds of the records in recs, which storage has
// just stored (and so charged). Records of other instances or without a
// ticket are ignored.
func (g *Gate) Committed(recs []storage.UsageRecord) {
	var done []*Ticket
	g.mu.Lock()
	for i := range recs {
		if recs[i].UserID == "" {
			continue
		}
		if t, ok := g.pending[recs[i].RequestID]; ok {
			delete(g.pending, recs[i].RequestID)
			done = append(done, t)
		}
	}
	g.mu.Unlock()
	for _, t := range done {
		g.release(t)
	}
}

// Pending is how many finished requests wait for their charge to be stored.
func (g *Gate) Pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// release takes t's estimate off its user's hold, once, in the window it
// is counted in. Once released, t is never counted again, whether or not
// the cache took the release.
func (g *Gate) release(t *Ticket) {
	g.releaseConc(t)
	if t.released.Swap(true) || g.cache == nil || t.estimate == 0 {
		return
	}
	if err := g.adjust(t, -t.estimate); err != nil {
		g.opts.Logger.Warn("billing: hold not released; it expires with its window", "err", err)
	}
	g.forget(t)
}

// forget drops t's hold from what this instance counts: it is no longer
// held, or its window has ended.
func (g *Gate) forget(t *Ticket) {
	g.counting.RLock()
	t.estimate = 0
	g.track(t)
	g.counting.RUnlock()
}

// adjust adds d to t's user's hold in t's window, and to t's hold once
// the cache has taken it.
func (g *Gate) adjust(t *Ticket, d int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var ops [2]storage.CacheOp
	err := g.count(ctx, t, ops[:], func(slot int64) {
		ops[1] = storage.CacheOp{Kind: storage.CacheIncr, Key: holdKey(t.user.ID, slot), N: d, TTL: g.opts.HoldWindow}
	}, func() {
		if ops[1].Err == nil && !ops[1].Skipped {
			t.estimate += d
			g.track(t)
		}
	})
	if err == nil {
		err = ops[1].Err
	}
	return err
}

// releaseConc frees t's concurrency slot, once, in the window it is
// counted in.
func (g *Gate) releaseConc(t *Ticket) {
	if !t.conc {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var ops [2]storage.CacheOp
	err := g.count(ctx, t, ops[:], func(slot int64) {
		ops[1] = storage.CacheOp{Kind: storage.CacheIncr, Key: concKey(t.user.ID, slot), N: -1, TTL: g.opts.HoldWindow}
	}, func() {
		// Freed whether or not the cache took it: a slot it kept expires
		// with its window, and is never counted again.
		t.conc = false
		g.track(t)
	})
	if err == nil {
		err = ops[1].Err
	}
	if err != nil {
		g.opts.Logger.Warn("billing: concurrency slot not released; it expires with its window", "err", err)
	}
}

// track keeps t in the set of live tickets while it has a hold or a slot
// counted. Call it with g.counting held, after changing t's state.
func (g *Gate) track(t *Ticket) {
	g.liveMu.Lock()
	if t.estimate != 0 || t.conc {
		g.live[t] = struct{}{}
	} else {
		delete(g.live, t)
	}
	g.liveMu.Unlock()
}

// window returns the hold window of time now.
func (g *Gate) window(now time.Time) int64 {
	return now.UnixMilli() / g.opts.HoldWindow.Milliseconds()
}

// count runs ops in one batch (storage.Batch), ops[0] set to a guard
// (storage.CacheGuard) on this instance's marker of ticket t's window
// (markerKey), and calls apply to update the tickets' state from the ops'
// outcomes, with g.counting held so that a re-assertion sees each ticket
// either as counted or not yet. set fills ops[1:] with counter ops of the
// window it is given (t's, read under g.counting: reassert may move a live
// ticket); apply must treat a Skipped op as not run.
//
// When the marker is gone, the cache has lost what this instance counted
// in the window (Redis restarted empty), or this is the instance's first
// count in a new window: the guard skipped ops, so nothing was taken back
// from counters that no longer hold it. reassert then counts again the
// hold and slot of every live ticket in the current window, and ops run
// once more, after them, in t's window as it is then. The error is the
// guard's: the cache did not answer, or lost the marker again (errLost).
func (g *Gate) count(ctx context.Context, t *Ticket, ops []storage.CacheOp, set func(slot int64), apply func()) error {
	g.counting.RLock()
	slot := t.slot
	set(slot)
	ops[0] = storage.CacheOp{Kind: storage.CacheGuard, Key: g.markerOf(slot), TTL: g.opts.HoldWindow}
	_ = storage.Batch(ctx, g.cache, ops) // each op carries its error
	if ops[0].Err != nil || ops[0].Total > 0 {
		apply()
		g.counting.RUnlock()
		return ops[0].Err
	}
	g.counting.RUnlock()
	g.counting.Lock()
	defer g.counting.Unlock()
	cur := max(slot, g.window(g.opts.Now()))
	err := g.reassert(ctx, cur)
	if err == nil {
		if t.slot < cur && t.estimate == 0 && !t.conc {
			t.slot = cur // a ticket counting its first op, admitted as the window turned
		}
		slot = t.slot
		set(slot)
		ops[0] = storage.CacheOp{Kind: storage.CacheGuard, Key: g.markerOf(slot), TTL: g.opts.HoldWindow}
		_ = storage.Batch(ctx, g.cache, ops)
		if err = ops[0].Err; err == nil && ops[0].Total == 0 {
			err = errLost
		}
	}
	apply()
	return err
}

// errLost is count's error when the cache lost its marker again between
// the re-assertion and the ops: they did not run.
var errLost = errors.New("billing: the cache lost this instance's holds twice in a row")

// reassert brings this instance's live tickets into window cur, in one
// batch: the tickets of earlier windows move into it (counted in cur,
// taken off the window they leave), and when cur's marker is gone (the
// cache lost what this instance counted, or nothing was counted in cur
// yet) the tickets already in cur are counted again and the marker set. A
// ticket admitted more than HoldLife ago is not moved: it stops being
// live, and what it holds ends with its window. Call it with g.counting
// held exclusively.
func (g *Gate) reassert(ctx context.Context, cur int64) error {
	marker := g.markerOf(cur)
	for range 2 {
		n, err := g.cache.Count(ctx, marker, g.opts.HoldWindow)
		if err != nil {
			return err
		}
		now := g.opts.Now()
		var moved []*Ticket
		sums := map[string]int64{}
		again := 0
		g.liveMu.Lock()
		for t := range g.live {
			switch {
			case t.slot > cur:
				// the clock went back: leave it where it is counted
			case t.slot < cur && now.Sub(t.at) > g.opts.HoldLife:
				delete(g.live, t)
			case t.slot < cur:
				moved = append(moved, t)
				sumTicket(sums, t, cur, 1)
				sumTicket(sums, t, t.slot, -1)
			case n == 0:
				again++
				sumTicket(sums, t, cur, 1)
			}
		}
		g.liveMu.Unlock()
		if n > 0 && len(moved) == 0 {
			return nil
		}
		ops := make([]storage.CacheOp, 1, len(sums)+1)
		if n > 0 {
			// counted in cur already: only the moves, behind its marker
			ops[0] = storage.CacheOp{Kind: storage.CacheGuard, Key: marker, TTL: g.opts.HoldWindow}
		} else {
			ops[0] = storage.CacheOp{Kind: storage.CacheIncr, Key: marker, N: 1, TTL: g.opts.HoldWindow}
		}
		for k, d := range sums {
			if d != 0 {
				ops = append(ops, storage.CacheOp{Kind: storage.CacheIncr, Key: k, N: d, TTL: g.opts.HoldWindow})
			}
		}
		if err := storage.Batch(ctx, g.cache, ops); err != nil {
			g.opts.Logger.Warn("billing: holds and slots in flight not counted in the current window", "tickets", len(moved)+again, "err", err)
			return err
		}
		if n > 0 && ops[0].Total == 0 {
			continue // the marker went between the read and the batch: nothing ran; count all
		}
		for _, t := range moved {
			t.slot = cur
		}
		if again > 0 {
			g.opts.Logger.Warn("billing: the cache had lost this instance's holds and slots in flight (restarted empty?); counted them again", "tickets", again)
		}
		return nil
	}
	return errLost
}

// sumTicket adds sign × t's hold and slot to sums, keyed by the counters
// of window slot.
func sumTicket(sums map[string]int64, t *Ticket, slot int64, sign int64) {
	if t.estimate != 0 {
		sums[holdKey(t.user.ID, slot)] += sign * t.estimate
	}
	if t.conc {
		sums[concKey(t.user.ID, slot)] += sign
	}
}

// Check brings this instance's holds and slots in flight into the
// current window, as the next count of any of them would: it moves them
// out of a window that has ended, and counts them again if the cache has
// lost them (Redis restarted empty). An instance whose requests are all
// streaming counts nothing until they end; Watch calls Check periodically.
func (g *Gate) Check(ctx context.Context) error {
	if g.cache == nil {
		return nil
	}
	now := g.opts.Now()
	cur := g.window(now)
	inflight, move := false, false
	g.counting.RLock()
	g.liveMu.Lock()
	for t := range g.live {
		switch {
		case t.slot < cur:
			move = true
		case t.slot == cur:
			inflight = true
		}
	}
	g.liveMu.Unlock()
	if !inflight && !move {
		g.counting.RUnlock()
		return nil
	}
	if !move {
		n, err := g.cache.Count(ctx, g.markerOf(cur), g.opts.HoldWindow)
		if err != nil || n > 0 {
			g.counting.RUnlock()
			return err
		}
	}
	g.counting.RUnlock()
	g.counting.Lock()
	defer g.counting.Unlock()
	return g.reassert(ctx, cur)
}

// DefaultWatchInterval is the period of Watch's check in the gateway: the
// longest a cache that restarted empty misses an idle instance's holds and
// slots in flight.
const DefaultWatchInterval = time.Second

// Watch calls Check every interval (<= 0: DefaultWatchInterval) until ctx
// ends.
func (g *Gate) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		cctx, cancel := context.WithTimeout(ctx, interval)
		if err := g.Check(cctx); err != nil && ctx.Err() == nil {
			g.opts.Logger.Debug("billing: holds in flight not checked", "err", err)
		}
		cancel()
	}
}

// Writer is what CommitWriter wraps: storage's usage writer (the usage
// journal writes through it).
type Writer interface {
	InsertUsage(ctx context.Context, recs []storage.UsageRecord) error
	InsertErrorEvents(ctx context.Context, evs []storage.ErrorEvent) error
}

// CommitWriter returns w that tells g which records storage took, so their
// holds are released only once their charges are stored — after a journal
// replay too.
func CommitWriter(w Writer, g *Gate) Writer { return commitWriter{w, g} }

type commitWriter struct {
	Writer
	g *Gate
}

func (c commitWriter) InsertUsage(ctx context.Context, recs []storage.UsageRecord) error {
	err := c.Writer.InsertUsage(ctx, recs)
	if err == nil {
		c.g.Committed(recs)
	}
	return err
}
