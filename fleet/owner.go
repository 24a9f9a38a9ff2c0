package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
)

// Pool is what ownership drives: the accounts this instance knows, and
// running or draining their actors (actors.System with Config.Fenced).
type Pool interface {
	Accounts(ctx context.Context) ([]string, error)
	Own(id string, f *actors.Fence)
	Disown(id string, done func())
}

// OwnerConfig configures an Owners.
type OwnerConfig struct {
	Fleet *Fleet            // the live set; required
	Store storage.Ownership // the leases (rediscache.Cache); required
	Pool  Pool              // required
	// TTL is the life of an ownership lease after its last renewal:
	// an instance that dies leaves its accounts unserved this long at most
	// (after the set has dropped it). Default the Fleet's TTL.
	TTL time.Duration
	// Interval is the renewal period; default the Fleet's heartbeat.
	Interval time.Duration
	Logger   *slog.Logger // default the Fleet's
	// Adopt, when set, is called with the accounts this instance has just
	// taken (on a goroutine of its own, the context ending after
	// AdoptTimeout), before they may grant: it counts on them the leases
	// their previous owner granted to other instances that still run
	// (Peer.Adopt). Their fences hold from when it returns. It is not
	// called for an account whose take was Clean (its previous owner
	// drained it, or it had none): that one grants at once, as every
	// taken account does when Adopt is nil.
	Adopt func(ctx context.Context, accounts []string)
}

// AdoptTimeout bounds OwnerConfig.Adopt: an account taken over grants
// after it at the latest, whatever the other instances answered.
const AdoptTimeout = 2 * time.Second

// Owners keeps this instance's ownership leases: every Interval one
// batched renewal (one round trip for all its accounts) takes the leases
// of the accounts rendezvous hashing gives it, renews those it holds, and
// releases those that moved away once they drained. Each held lease is a
// Fence its account actor checks on every grant; the fence ends a quarter
// of the TTL before the lease can expire in Redis, measured from when the
// renewal was sent, so a lease that cannot be renewed stops the grants
// before another instance can take the account.
type Owners struct {
	cfg    OwnerConfig
	log    *slog.Logger
	margin time.Duration

	mu    sync.Mutex
	held  map[string]*held // accounts whose lease this instance holds
	owned atomic.Int64     // accounts running here (not draining)
	err   string           // the last renewal's error

	adopt []string // accounts taken in this renewal, for OwnerConfig.Adopt

	kick   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// held is one lease this instance holds.
type held struct {
	fence    *actors.Fence
	draining bool
	// adopting: taken, and OwnerConfig.Adopt has not returned yet; the
	// fence holds nothing meanwhile, until is what it will hold to.
	adopting bool
	until    time.Time
	drained  atomic.Bool // set by the pool once the draining actor stopped
}

// StartOwners takes this instance's share of the accounts (one renewal,
// bounded by ctx) and keeps it until Stop.
func StartOwners(ctx context.Context, cfg OwnerConfig) (*Owners, error) {
	if cfg.Fleet == nil || cfg.Store == nil || cfg.Pool == nil {
		return nil, fmt.Errorf("%w: fleet: owners need a Fleet, a Store and a Pool", storage.ErrInvalid)
	}
	if cfg.TTL == 0 {
		cfg.TTL = cfg.Fleet.cfg.TTL
	}
	if cfg.Interval == 0 {
		cfg.Interval = cfg.Fleet.cfg.Interval
	}
	if cfg.Logger == nil {
		cfg.Logger = cfg.Fleet.log
	}
	margin := cfg.TTL / 4
	if cfg.Interval <= 0 || cfg.Interval >= cfg.TTL-margin {
		return nil, fmt.Errorf("%w: fleet: renewal interval (%v) must be positive and shorter than 3/4 of the lease ttl (%v)", storage.ErrInvalid, cfg.Interval, cfg.TTL)
	}
	o := &Owners{cfg: cfg, log: cfg.Logger, margin: margin, held: make(map[string]*held),
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	o.renew(ctx)
	lctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	go o.run(lctx)
	return o, nil
}

// Owned returns how many accounts run on this instance now.
func (o *Owners) Owned() int { return int(o.owned.Load()) }

// Holder reports whether this instance holds account id's lease, and its token.
func (o *Owners) Holder(id string) (token uint64, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h, ok := o.held[id]
	if !ok {
		return 0, false
	}
	return h.fence.Token(), true
}

// Err returns the last renewal's error ("" after a success).
func (o *Owners) Err() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

func (o *Owners) run(ctx context.Context) {
	defer close(o.done)
	t := time.NewTicker(o.cfg.Interval)
	defer t.Stop()
	for {
		changed := o.cfg.Fleet.Changed()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-changed: // a member joined or left: move at once
		case <-o.kick: // an account drained: hand it over at once
		}
		o.safeRenew(ctx)
	}
}

func (o *Owners) safeRenew(ctx context.Context) {
	defer func() {
		if r := recover(); r != nil {
			o.log.Error("fleet: ownership renewal panicked", "panic", fmt.Sprint(r))
		}
	}()
	o.renew(ctx)
}

// renew is one tick: decide, renew in one round trip, apply.
func (o *Owners) renew(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, o.cfg.Interval)
	defer cancel()
	ids, err := o.cfg.Pool.Accounts(rctx)
	if err != nil {
		return // the pool is stopping
	}
	self, members := o.cfg.Fleet.Self().ID, o.cfg.Fleet.Members()
	known := make(map[string]bool, len(ids))
	o.mu.Lock()
	claims := make([]storage.OwnershipClaim, 0, len(o.held)+len(ids)/max(len(members), 1))
	for _, id := range ids {
		known[id] = true
		h := o.held[id]
		switch {
		case Owner(id, members) == self:
			claims = append(claims, storage.OwnershipClaim{Account: id, Want: true})
		case h != nil:
			// Moving away: keep the lease while the actor drains, then
			// release it, saying so (the next owner need not ask for leases).
			d := h.drained.Load()
			claims = append(claims, storage.OwnershipClaim{Account: id, Want: !d, Drained: d})
		}
	}
	for id, h := range o.held {
		if !known[id] { // removed from the pool: its actor is gone, release the lease
			h.drained.Store(true)
			claims = append(claims, storage.OwnershipClaim{Account: id})
		}
	}
	o.mu.Unlock()
	if len(claims) == 0 {
		return
	}
	sent := time.Now()
	if err := o.cfg.Store.Renew(rctx, self, claims, o.cfg.TTL); err != nil {
		if ctx.Err() != nil {
			return
		}
		o.mu.Lock()
		if o.err == "" {
			o.log.Warn("fleet: ownership leases not renewed; accounts stop granting when their fence ends",
				"fence", o.cfg.TTL-o.margin, "err", err.Error())
		}
		o.err = err.Error()
		o.mu.Unlock()
		return
	}
	until := sent.Add(o.cfg.TTL - o.margin)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != "" {
		o.log.Info("fleet: ownership leases renewed again")
		o.err = ""
	}
	for i := range claims {
		o.apply(&claims[i], self, members, until)
	}
	if ids := o.adopt; len(ids) > 0 {
		o.adopt = nil
		go o.adopted(ctx, ids)
	}
	var n int64
	for _, h := range o.held {
		if !h.draining {
			n++
		}
	}
	o.owned.Store(n)
}

// apply acts on one claim's outcome. o.mu is held.
func (o *Owners) apply(cl *storage.OwnershipClaim, self string, members []Member, until time.Time) {
	h := o.held[cl.Account]
	if cl.Holder != self {
		if h != nil {
			delete(o.held, cl.Account)
			if cl.Want || !h.drained.Load() {
				// Lost: the lease expired and another instance took it. The
				// fence has ended already; stop the actor.
				o.log.Warn("fleet: ownership lease lost", "account", cl.Account, "holder", cl.Holder, "token", cl.Token)
				o.cfg.Pool.Disown(cl.Account, nil)
			}
		}
		return
	}
	if h == nil {
		h = &held{fence: new(actors.Fence)}
		if o.cfg.Adopt != nil && !cl.Clean {
			// The actor runs (the leases to adopt count on it) but grants
			// nothing until adopted opens the fence.
			h.adopting, h.until = true, until
			h.fence.Extend(time.Time{}, cl.Token)
			o.adopt = append(o.adopt, cl.Account)
		} else {
			h.fence.Extend(until, cl.Token)
		}
		o.held[cl.Account] = h
		o.cfg.Pool.Own(cl.Account, h.fence)
		return
	}
	if h.adopting {
		h.until = until
		h.fence.Extend(time.Time{}, cl.Token)
		if Owner(cl.Account, members) == self {
			return
		}
		h.adopting = false // moving away already: drain as below
	}
	lapsed := !h.fence.Holds(time.Now())
	h.fence.Extend(until, cl.Token)
	mine := Owner(cl.Account, members) == self
	switch {
	case mine && (h.draining || lapsed):
		// Back, or granting again after a lapse.
		h.draining = false
		h.drained.Store(false)
		o.cfg.Pool.Own(cl.Account, h.fence)
	case !mine && !h.draining:
		h.draining = true
		o.cfg.Pool.Disown(cl.Account, func() {
			h.drained.Store(true)
			select {
			case o.kick <- struct{}{}:
			default:
			}
		})
	}
}

// adopted runs OwnerConfig.Adopt for the accounts just taken, then opens
// their fences (to the last renewal's deadline) and lets them grant.
func (o *Owners) adopted(ctx context.Context, ids []string) {
	defer func() {
		if r := recover(); r != nil {
			o.log.Error("fleet: adopting leases panicked", "panic", fmt.Sprint(r))
		}
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, id := range ids {
			if h := o.held[id]; h != nil && h.adopting {
				h.adopting = false
				h.fence.Extend(h.until, h.fence.Token())
				o.cfg.Pool.Own(id, h.fence)
			}
		}
	}()
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), AdoptTimeout)
	defer cancel()
	o.cfg.Adopt(actx, ids)
}

// Stop ends the renewals and releases every lease this instance holds, so
// that the next owners take the accounts at their next renewal rather than
// after the TTL. Call it once this instance grants nothing more (its front
// has stopped). It waits for the loop, bounded by ctx.
func (o *Owners) Stop(ctx context.Context) error {
	var err error
	o.once.Do(func() {
		o.cancel()
		select {
		case <-o.done:
		case <-ctx.Done():
			err = ctx.Err()
			return
		}
		o.mu.Lock()
		claims := make([]storage.OwnershipClaim, 0, len(o.held))
		for id, h := range o.held {
			h.fence.Extend(time.Time{}, h.fence.Token()) // grant nothing more
			claims = append(claims, storage.OwnershipClaim{Account: id})
		}
		o.held = map[string]*held{}
		o.owned.Store(0)
		o.mu.Unlock()
		if rerr := o.cfg.Store.Renew(ctx, o.cfg.Fleet.Self().ID, claims, o.cfg.TTL); rerr != nil {
			err = fmt.Errorf("fleet: release leases: %w", rerr)
		}
	})
	return err
}
