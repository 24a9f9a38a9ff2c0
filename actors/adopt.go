package actors

import (
	"context"
	"fmt"
	"sync/atomic"
)

// This file is the takeover of leases (docs/fleet.md, "A dead owner's
// leases"): when an instance takes over an account whose previous owner
// died, the leases that owner granted to other instances still run. The
// new owner learns them from their holders and counts each one here, as
// a lease of its own, against max_concurrency, until the holder's release
// (System.Release of the returned Lease) or the fleet's expiry ends it.

// accountAdopt has the account count a lease granted before it ran here.
type accountAdopt struct {
	model string
	reply chan *Lease
	// state decides, once, between the account counting the lease
	// (adoptAsked → adoptCounted) and the caller giving up when its
	// context ends first (adoptAsked → adoptGivenUp): a lease counted for
	// a caller gone would never be released.
	state *atomic.Int32
}

// accountAdopt.state values.
const (
	adoptAsked int32 = iota
	adoptCounted
	adoptGivenUp
)

// Adopt counts on account id, which this instance must run
// (Config.Fenced: owned, its actor spawned), a lease another instance
// holds for a request for model, granted by the account's previous
// owner. The lease counts against max_concurrency whatever the account's
// state (it runs already: refusing it would not stop it), is not a grant
// (View.Requests is unchanged) and ends with Release. The error is ctx's
// when it ends before the account has counted the lease (the account does
// not run here, or is slow): the ask is then dropped, nothing counted. A
// lease the account counted first is returned even though ctx has ended.
func (s *System) Adopt(ctx context.Context, id, model string) (*Lease, error) {
	m := accountAdopt{model: model, reply: make(chan *Lease, 1), state: new(atomic.Int32)}
	s.engine.Send(s.pool, poolForward{id: id, msg: m})
	select {
	case l := <-m.reply:
		return l, nil
	case <-ctx.Done():
		if m.state.CompareAndSwap(adoptAsked, adoptGivenUp) {
			return nil, fmt.Errorf("actors: adopt a lease on %s: %w", id, ctx.Err())
		}
		return <-m.reply, nil // counted: the account is sending it
	}
}

// adopt counts a lease granted by the account's previous owner.
func (a *account) adopt(c *mailCtx, m accountAdopt) {
	if !m.state.CompareAndSwap(adoptAsked, adoptCounted) {
		return // the caller gave up: count nothing
	}
	now := a.cfg.now()
	a.nextLease++
	id := a.nextLease
	a.leases = append(a.leases, heldLease{id: id, granted: now, model: m.model})
	a.inFlight++
	a.publish(c)
	m.reply <- &Lease{ID: id, AccountID: a.view.ID, Name: a.view.Name, Provider: a.view.Provider,
		Transport: a.transport, Granted: now, pid: a.pid(), box: a.box}
}
