package actors

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/storage"
)

// This file is the seam between the pool and the fleet's ownership
// (docs/fleet.md): with Config.Fenced an account actor runs only on the
// instance that owns the account, only while its ownership lease (a
// Fence) holds, and moves away by draining.

// Fence is an account's ownership lease as its actor sees it: the instant,
// on this process's clock, until which the account may grant leases, and
// the lease's fencing token. The fleet's renewal extends it; an account
// whose fence has passed refuses every grant, so an owner that cannot
// renew its lease stops granting before another instance may take the
// account. A grant costs one atomic load. Safe for concurrent use; the
// zero Fence holds nothing.
type Fence struct {
	until atomic.Int64 // Unix ns
	token atomic.Uint64
}

// Extend makes the fence hold until until with token.
func (f *Fence) Extend(until time.Time, token uint64) {
	f.token.Store(token)
	f.until.Store(until.UnixNano())
}

// Holds reports whether the fence holds at now.
func (f *Fence) Holds(now time.Time) bool { return now.UnixNano() < f.until.Load() }

// Until returns the end of the fence.
func (f *Fence) Until() time.Time { return time.Unix(0, f.until.Load()) }

// Token returns the lease's fencing token (0 before the first Extend).
func (f *Fence) Token() uint64 { return f.token.Load() }

// --- messages ------------------------------------------------------------------

// poolOwn hands the pool the fence of an account this instance now owns:
// its actor is spawned (once its configuration is known), or, when it was
// draining or its fence had lapsed, granting again.
type poolOwn struct {
	id    string
	fence *Fence
}

// poolDisown has the account drain: no new grants, and once its leases in
// flight have ended the actor stops and done is called (from a goroutine
// of the pool's). An Own before then cancels the drain; done is not called.
type poolDisown struct {
	id   string
	done func()
}

// poolDrained is an account's word that it drains and holds no lease,
// with its state to hand over (Config.States; nil without).
type poolDrained struct {
	id    string
	state *State
}

// poolAccounts asks for the IDs of every account put, owned or not.
type poolAccounts struct{ reply chan []string }

// poolServed asks what every enabled account put serves, owned or not.
type poolServed struct{ reply chan []Served }

// accountOwned tells the account it may grant again (ownership confirmed).
type accountOwned struct{}

// accountDrain tells the account to stop granting and report when it holds no lease.
type accountDrain struct{ pool *actor.PID }

// --- System ----------------------------------------------------------------------

// Own makes this instance run account id under fence f (Config.Fenced):
// its actor is spawned when its configuration is known (PutAccount, before
// or after), and an account draining or whose fence had lapsed grants
// again. Without Config.Fenced it does nothing.
func (s *System) Own(id string, f *Fence) {
	s.engine.Send(s.pool, poolOwn{id: id, fence: f})
}

// Disown has account id drain: it grants nothing more, and once its
// leases in flight end its actor stops and done is called. done is not
// called when the account was not running (call sites know) or when Own
// takes it back first.
func (s *System) Disown(id string, done func()) {
	s.engine.Send(s.pool, poolDisown{id: id, done: done})
}

// Accounts returns the IDs of every account put and not removed, owned
// or not, in no order.
func (s *System) Accounts(ctx context.Context) ([]string, error) {
	reply := make(chan []string, 1)
	s.engine.Send(s.pool, poolAccounts{reply: reply})
	select {
	case ids := <-reply:
		return ids, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Served is what one enabled account of the deployment serves, for the
// model catalog: its provider and models (empty: any model), and its
// status as its latest view says, this instance's own or the one its
// owner published (RemoteViews); StatusActive, the zero value, while no
// view of it is known.
type Served struct {
	ID       string
	Provider storage.Provider
	Models   []string
	Status   Status
}

// Serves reports whether the account serves model.
func (s Served) Serves(model string) bool {
	return len(s.Models) == 0 || slices.Contains(s.Models, model)
}

// Served returns what every enabled account of the deployment serves,
// owned by this instance or not, when accounts run only on their owners
// (Config.Fenced): an instance's own views then hold only its share, yet
// the deployment serves every account's models. Each one carries its
// status where a view of it is known (this instance's, or the one its
// owner published). Nil without Config.Fenced (Views holds every
// account). The error is ctx's.
func (s *System) Served(ctx context.Context) ([]Served, error) {
	if !s.fenced {
		return nil, nil // no pool round trip for every /v1/models
	}
	reply := make(chan []Served, 1)
	s.engine.Send(s.pool, poolServed{reply: reply})
	select {
	case out := <-reply:
		for i := range out {
			if v, ok := s.View(out[i].ID); ok {
				out[i].Status = v.Status
			}
		}
		return out, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// --- pool ---------------------------------------------------------------------------

// fenced is the pool's state under Config.Fenced.
type fenced struct {
	configs  map[string]poolPut // every account put, by ID
	fences   map[string]*Fence  // the accounts owned
	draining map[string]func()  // accounts draining → done
}

// receiveFenced handles the ownership messages; it reports whether msg was one.
func (p *pool) receiveFenced(c *mailCtx, msg any) bool {
	f := p.fenced
	switch m := msg.(type) {
	case poolOwn:
		if f == nil {
			return true
		}
		f.fences[m.id] = m.fence
		delete(f.draining, m.id)
		if box := p.box(m.id); box != nil {
			c.Send(box.PID(), accountOwned{})
		} else if put, ok := f.configs[m.id]; ok {
			p.put(c, put.account)
		}
	case poolDisown:
		if f == nil {
			return true
		}
		delete(f.fences, m.id)
		if box := p.box(m.id); box != nil {
			f.draining[m.id] = m.done
			c.Send(box.PID(), accountDrain{pool: c.PID()})
		}
	case poolDrained:
		if f == nil {
			return true
		}
		done, ok := f.draining[m.id]
		if !ok {
			return true // owned again meanwhile
		}
		delete(f.draining, m.id)
		p.stop(c, m.id)
		if st, states := m.state, p.cfg.states; st != nil && states != nil {
			// Saved before the lease is released (done), so the next
			// owner, which may take it at once, reads it.
			go func() {
				states.saveNow(m.id, *st)
				if done != nil {
					done()
				}
			}()
		} else if done != nil {
			go done()
		}
	case poolAccounts:
		var ids []string
		if f != nil {
			for id := range f.configs {
				ids = append(ids, id)
			}
		} else {
			p.cfg.snapshots.eachMailbox(func(id string, _ *mailbox) {
				ids = append(ids, id)
			})
		}
		m.reply <- ids
	case poolServed:
		var out []Served
		if f != nil {
			out = make([]Served, 0, len(f.configs))
			for _, put := range f.configs {
				if a := put.account; !a.Disabled {
					out = append(out, Served{ID: a.ID, Provider: a.Provider, Models: a.Models})
				}
			}
		}
		m.reply <- out
	default:
		return false
	}
	return true
}

// owns reports whether the pool may run account id now, remembering its
// configuration either way (Config.Fenced); without Fenced it runs all.
func (p *pool) owns(put poolPut) (*Fence, bool) {
	f := p.fenced
	if f == nil {
		return nil, true
	}
	f.configs[put.account.ID] = put
	fence, ok := f.fences[put.account.ID]
	return fence, ok
}

// fenceOf returns account id's fence; nil without Config.Fenced.
func (p *pool) fenceOf(id string) *Fence {
	if p.fenced == nil {
		return nil
	}
	return p.fenced.fences[id]
}

// forget drops what the pool knows of a removed account's ownership.
func (p *pool) forget(id string) {
	if f := p.fenced; f != nil {
		delete(f.configs, id)
		delete(f.fences, id)
		delete(f.draining, id)
	}
}

// --- account ------------------------------------------------------------------------

// unfenced reports whether the account may not grant at now: it is
// draining, or its fence (Config.Fenced) has passed. The view then says
// so (View.Moving), published when it changes, so the scheduler stops
// picking it and readers see why.
func (a *account) unfenced(c *mailCtx, now time.Time) bool {
	if a.draining || a.restoring || (a.cfg.fence != nil && !a.cfg.fence.Holds(now)) {
		if !a.view.Moving {
			a.edit().Moving = true
			a.publish(c)
		}
		return true
	}
	return false
}

// receiveFence handles the ownership messages; it reports whether msg was one.
func (a *account) receiveFence(c *mailCtx, msg any) bool {
	switch m := msg.(type) {
	case accountOwned:
		a.draining = false
		if a.view.Moving && !a.restoring {
			a.edit().Moving = false
			a.publish(c)
		}
	case accountRestore:
		a.restore(c, m)
	case accountDrain:
		a.draining, a.drainTo = true, m.pool
		a.edit().Moving = true
		a.publish(c)
		a.drained(c)
	default:
		return false
	}
	return true
}

// drained tells the pool when a draining account holds no lease.
func (a *account) drained(c *mailCtx) {
	if a.draining && len(a.leases) == 0 && a.drainTo != nil {
		var st *State
		if a.cfg.states != nil && !a.restoring {
			s := a.state()
			st = &s
		}
		c.Send(a.drainTo, poolDrained{id: a.view.ID, state: st})
	}
}
