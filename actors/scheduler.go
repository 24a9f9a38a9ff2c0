package actors

import (
	"log/slog"
	"time"

	"github.com/anthdm/hollywood/actor"
)

// SchedulerStats are the scheduler's counters, read with System.SchedulerStats.
type SchedulerStats struct {
	Accounts  int    // accounts in the index
	Available int    // accounts that could take a lease now (by the scheduler's possibly stale view)
	Waiters   int    // parked acquire requests
	Grants    uint64 // grant messages sent to accounts
	Refusals  uint64 // grants refused by accounts (stale view)
	Parked    uint64 // requests that had to wait
	Rejected  uint64 // requests answered with an AcquireError
}

// entry is the scheduler's record of one account.
type entry struct {
	idx       uint32
	view      View
	pid       *actor.PID
	score     float64
	scored    bool // the policy accepted the account
	lastGrant uint64
	keys      []routeKey
	terminal  bool // counted as not live
}

// schedulerConfig configures the scheduler actor.
type schedulerConfig struct {
	policy    Policy
	maxWaiter int // bound on parked requests across all queues
	log       *slog.Logger
	now       func() time.Time
}

// scheduler is the actor that picks accounts. It owns the index of account
// views, the candidate heaps and the wait queues; it never blocks.
type scheduler struct {
	cfg     schedulerConfig
	byID    map[string]*entry
	next    uint32
	sets    map[routeKey]*candidates
	queues  map[routeKey]*waitQueue
	waiting int
	grants  uint64
	stats   SchedulerStats
	sweeper actor.SendRepeater
}

func newScheduler(cfg schedulerConfig) actor.Producer {
	return func() actor.Receiver {
		return &scheduler{
			cfg:    cfg,
			byID:   make(map[string]*entry),
			sets:   make(map[routeKey]*candidates),
			queues: make(map[routeKey]*waitQueue),
		}
	}
}

// Receive handles scheduler messages.
func (s *scheduler) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case actor.Started:
		s.sweeper = c.SendRepeat(c.PID(), schedSweep{}, time.Second)
	case actor.Stopped:
		s.sweeper.Stop()
	case schedAcquire:
		s.acquire(c, m.req)
	case schedView:
		s.onView(c, m.view, m.pid)
	case schedRefused:
		s.stats.Refusals++
		s.onView(c, m.view, nil)
		if m.req.state.Load() == acqPending {
			m.req.tries++
			s.acquire(c, m.req)
		}
	case schedRemove:
		s.remove(m.id)
	case schedSweep:
		s.sweep()
	case schedStats:
		st := s.stats
		st.Accounts = len(s.byID)
		st.Waiters = s.waiting
		avail := 0
		for _, e := range s.byID {
			if e.scored && e.view.Available(s.cfg.now()) {
				avail++
			}
		}
		st.Available = avail
		m.reply <- st
	}
}

// keysFor lists the candidate sets an account belongs to.
func keysFor(v *View) []routeKey {
	var keys []routeKey
	for _, ep := range endpoints {
		if !supports(v.Provider, ep) {
			continue
		}
		if len(v.Models) == 0 {
			keys = append(keys, routeKey{ep, v.Group, anyModel})
			continue
		}
		for _, m := range v.Models {
			keys = append(keys, routeKey{ep, v.Group, m})
		}
	}
	return keys
}

func terminal(st Status) bool {
	return st == StatusDisabled || st == StatusUnauthorized || st == StatusBanned
}

func (s *scheduler) set(k routeKey) *candidates {
	c := s.sets[k]
	if c == nil {
		c = newCandidates()
		s.sets[k] = c
	}
	return c
}

// onView installs a newer view of an account and restores the index.
func (s *scheduler) onView(c *actor.Context, v View, pid *actor.PID) {
	e := s.byID[v.ID]
	if e == nil {
		if pid == nil {
			return // a refusal from an account removed meanwhile
		}
		e = &entry{idx: s.next, pid: pid}
		s.next++
		s.byID[v.ID] = e
	} else if v.Version < e.view.Version {
		return // out of order; a newer view is installed
	} else if pid != nil {
		e.pid = pid
	}
	old := e.keys
	reconfigured := e.keys == nil || v.ConfigGen != e.view.ConfigGen
	e.view = v
	if reconfigured {
		e.keys = keysFor(&e.view)
	}
	if reconfigured && !sameKeys(old, e.keys) {
		for _, k := range old {
			cs := s.set(k)
			cs.remove(e)
			cs.members--
			if !e.terminal {
				cs.live--
			}
		}
		for _, k := range e.keys {
			cs := s.set(k)
			cs.members++
			if !e.terminal {
				cs.live++
			}
		}
	}
	if t := terminal(v.Status); t != e.terminal {
		d := 1
		if t {
			d = -1
		}
		for _, k := range e.keys {
			s.set(k).live += d
		}
		e.terminal = t
	}
	s.index(e)
	if e.view.Available(s.cfg.now()) {
		s.wake(c, e)
	}
}

func sameKeys(a, b []routeKey) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// index re-scores e and files it in, or out of, its candidate sets.
func (s *scheduler) index(e *entry) {
	now := s.cfg.now()
	e.score, e.scored = 0, false
	if e.view.Available(now) {
		e.score, e.scored = s.cfg.policy.Score(&e.view, now)
	}
	for _, k := range e.keys {
		cs := s.set(k)
		if e.scored {
			cs.set(e)
		} else {
			cs.remove(e)
		}
	}
}

func (s *scheduler) remove(id string) {
	e := s.byID[id]
	if e == nil {
		return
	}
	for _, k := range e.keys {
		cs := s.set(k)
		cs.remove(e)
		cs.members--
		if !e.terminal {
			cs.live--
		}
	}
	delete(s.byID, id)
}

// maxTries bounds the refusals one request may meet before it is parked.
const maxTries = 8

// acquire picks the best available candidate for req and asks its account for
// a lease, or parks req, or fails it.
func (s *scheduler) acquire(c *actor.Context, req *acquireState) {
	if req.state.Load() != acqPending {
		return
	}
	if req.tries < maxTries {
		if e := s.pick(req); e != nil {
			s.grant(c, e, req)
			return
		}
	}
	exact, wild := s.sets[req.key], s.sets[routeKey{req.key.endpoint, req.key.group, anyModel}]
	members, live := 0, 0
	if exact != nil {
		members += exact.members
		live += exact.live
	}
	if wild != nil {
		members += wild.members
		live += wild.live
	}
	switch {
	case members == 0:
		s.reject(req, &AcquireError{Err: ErrNoAccount})
	case live == 0:
		s.reject(req, &AcquireError{Err: ErrUnavailable, RetryAfter: time.Minute})
	case req.deadline.IsZero() || !s.cfg.now().Before(req.deadline):
		s.reject(req, &AcquireError{Err: ErrUnavailable, RetryAfter: time.Second})
	case s.waiting >= s.cfg.maxWaiter:
		s.reject(req, &AcquireError{Err: ErrBusy, RetryAfter: time.Second})
	default:
		q := s.queues[req.key]
		if q == nil {
			q = &waitQueue{}
			s.queues[req.key] = q
		}
		req.tries = 0
		req.enqueued = s.cfg.now()
		q.push(req)
		s.waiting++
		s.stats.Parked++
	}
}

func (s *scheduler) reject(req *acquireState, err *AcquireError) {
	if req.fail(err) {
		s.stats.Rejected++
	}
}

// pick returns the best available, non-excluded entry for req, or nil.
func (s *scheduler) pick(req *acquireState) *entry {
	a := s.best(s.sets[req.key], req)
	b := s.best(s.sets[routeKey{req.key.endpoint, req.key.group, anyModel}], req)
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case better(b, a):
		return b
	}
	return a
}

// best returns the top entry of cs that req does not exclude; excluded entries
// are set aside and restored, so the cost is O(len(Exclude)·log n).
func (s *scheduler) best(cs *candidates, req *acquireState) *entry {
	if cs == nil || cs.len() == 0 {
		return nil
	}
	if len(req.Exclude) == 0 {
		return cs.items[0]
	}
	var aside []*entry
	var found *entry
	for cs.len() > 0 {
		e := cs.items[0]
		if !req.excluded(e.view.ID) {
			found = e
			break
		}
		aside = append(aside, cs.pop())
	}
	for _, e := range aside {
		cs.set(e)
	}
	return found
}

// grant forwards req to e's account and assumes the lease optimistically, so
// the next pick spreads; the account's next view corrects any staleness.
func (s *scheduler) grant(c *actor.Context, e *entry, req *acquireState) {
	s.grants++
	s.stats.Grants++
	e.lastGrant = s.grants
	e.view.InFlight++
	s.index(e)
	c.Send(e.pid, accountGrant{req: req})
}

// wake serves parked requests that e's capacity can now take, oldest first.
func (s *scheduler) wake(c *actor.Context, e *entry) {
	if s.waiting == 0 {
		return
	}
	for _, k := range e.keys {
		if k.model != anyModel {
			s.drain(c, k)
			continue
		}
		for qk := range s.queues {
			if qk.lane() == k.lane() {
				s.drain(c, qk)
			}
		}
	}
}

// drain hands parked requests of key k to available accounts until none is left.
func (s *scheduler) drain(c *actor.Context, k routeKey) {
	q := s.queues[k]
	for q != nil && q.len() > 0 {
		req := q.peek()
		if req.state.Load() != acqPending {
			q.pop()
			s.waiting--
			continue
		}
		e := s.pick(req)
		if e == nil {
			return
		}
		q.pop()
		s.waiting--
		s.grant(c, e, req)
	}
}

// sweep drops abandoned waiters and fails those past their deadline.
func (s *scheduler) sweep() {
	now := s.cfg.now()
	for k, q := range s.queues {
		for _, r := range q.items[q.head:] {
			if !r.deadline.IsZero() && now.After(r.deadline) {
				s.reject(r, &AcquireError{Err: ErrBusy, RetryAfter: time.Second})
			}
		}
		s.waiting -= q.prune()
		if q.len() == 0 {
			delete(s.queues, k)
		}
	}
}
