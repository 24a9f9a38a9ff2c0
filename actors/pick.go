package actors

import (
	"slices"
	"time"

	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/upstream"
)

// maxTries bounds the refusals one request may meet before it is parked.
const maxTries = 8

// acquire picks the best available candidate for req and asks its account for
// a lease, or parks req, or fails it. (Kept small, as Receive: see there.)
func (s *scheduler) acquire(c *mailCtx, req *acquireState) {
	if req.state.Load() != acqPending {
		return
	}
	// Rechecks that are due run before the pick, not at the next tick, so
	// an account whose score changed with time is judged on time.
	if len(s.rechecks) > 0 && !s.rechecks[0].due.After(s.cfg.now()) {
		s.runRechecks(c)
	}
	if req.tries < maxTries {
		if e := s.pick(req); e != nil {
			s.grant(c, e, req)
			return
		}
	}
	s.park(c, req)
}

// slotOf returns the slot and policy that judge req: the canary's when req
// asks for it and a canary runs, else the policy's.
func (s *scheduler) slotOf(req *acquireState) (int, Policy) {
	if req.Canary && s.canary != nil && s.canaryReady {
		return slotCanary, s.canary
	}
	return slotPolicy, s.policy
}

// pick returns the account for req: its preferred or sticky account when
// that one is still a candidate, else the best available non-excluded
// candidate that matches req's route filters, with the policy's top-k
// jitter. It records why in req.decision, and the slot judging req in req.slot.
func (s *scheduler) pick(req *acquireState) *entry {
	sl, pol := s.slotOf(req)
	req.slot = sl
	if req.Only != "" || req.Prefer != "" || req.StickyKey != "" {
		if e, done := s.pickPinned(req, sl, pol); done {
			return e
		}
	}
	k := pol.Knobs()
	n := 1
	if k.TopK > 1 && k.Jitter > 0 {
		n = k.TopK
	}
	s.top = s.top[:0]
	s.skipped = 0
	s.collect(s.sets[sl][req.key], req, n)
	s.collect(s.sets[sl][routeKey{req.key.group, anyModel}], req, n)
	if len(s.top) == 0 {
		return nil
	}
	// s.top holds up to n best of each set; order them (a few entries: an
	// insertion sort, without sort.Slice's frames) and apply the jitter.
	for i := 1; i < len(s.top); i++ {
		for j := i; j > 0 && better(s.top[j], s.top[j-1], sl); j-- {
			s.top[j], s.top[j-1] = s.top[j-1], s.top[j]
		}
	}
	top := s.top[:min(n, len(s.top))]
	e := top[pickRank(k, len(top), s.cfg.rand)]
	s.trace(req, ViaScore, e, top, s.setSizes(sl, req), s.skipped, pol, sl == slotCanary)
	clear(s.top)
	if req.StickyKey != "" {
		s.sticky[req.StickyKey] = stickyEntry{id: e.view.ID, expires: s.cfg.now().Add(k.StickyTTL)}
	}
	return e
}

// pickPinned serves pick for a request naming its account: Only (that one
// or none: done), or Prefer or its sticky key's account while it is a
// candidate (done), else not done (pick by score).
//
//go:noinline
func (s *scheduler) pickPinned(req *acquireState, sl int, pol Policy) (e *entry, done bool) {
	now := s.cfg.now()
	if req.Only != "" {
		return s.pinned(req.Only, ViaPrefer, req, sl, pol, now), true
	}
	if req.Prefer != "" {
		if e := s.pinned(req.Prefer, ViaPrefer, req, sl, pol, now); e != nil {
			return e, true
		}
	}
	if req.StickyKey != "" {
		if st, ok := s.sticky[req.StickyKey]; ok && now.Before(st.expires) {
			if e := s.pinned(st.id, ViaSticky, req, sl, pol, now); e != nil {
				return e, true
			}
		}
	}
	return nil, false
}

// pinned returns account id for req when it is a candidate of slot sl that
// matches req, recording the pick as via; else nil. An account another
// instance owns is asked on the first try even when its view shows it at
// its limit: a remote view's in-flight count lags its owner's by up to a
// second (fleet.ViewsCounters), and the owner decides; its refusal brings
// its current view, and the retry is judged on that.
func (s *scheduler) pinned(id string, via Via, req *acquireState, sl int, pol Policy, now time.Time) *entry {
	e := s.byID[id]
	if e == nil || !s.matches(e, req) || !s.inSet(e, req) {
		return nil
	}
	if !e.candidate(now, sl) && (e.owner == nil || req.tries > 0 || !e.v[sl].scored.OK || !e.view.Usable(now)) {
		return nil
	}
	s.trace(req, via, e, nil, s.setSizes(sl, req), 0, pol, sl == slotCanary)
	return e
}

// setSizes returns how many available accounts req's candidate sets of slot sl hold.
func (s *scheduler) setSizes(sl int, req *acquireState) int {
	n := 0
	if cs := s.sets[sl][req.key]; cs != nil {
		n += cs.len()
	}
	if cs := s.sets[sl][routeKey{req.key.group, anyModel}]; cs != nil {
		n += cs.len()
	}
	return n
}

// matches applies req's exclusions and route filters to e, and skips an
// account whose limit family for req's model has run out (families.go):
// it stays a candidate for its other models.
func (s *scheduler) matches(e *entry, req *acquireState) bool {
	if req.excluded(e.view.ID) {
		return false
	}
	if len(e.view.Families) > 0 && e.view.ModelCooling(req.Model, s.cfg.now()) {
		return false
	}
	if req.Provider != "" && e.view.Provider != req.Provider {
		return false
	}
	if req.Native && !upstream.Supports(e.view.Provider, req.Endpoint) {
		return false
	}
	for _, t := range req.Tags {
		if !slices.Contains(e.view.Tags, t) {
			return false
		}
	}
	return true
}

// inSet reports whether e belongs to req's candidate sets.
func (s *scheduler) inSet(e *entry, req *acquireState) bool {
	for _, k := range e.keys {
		if k == req.key || k == (routeKey{req.key.group, anyModel}) {
			return true
		}
	}
	return false
}

// collect appends to s.top the best n entries of cs that match req, walking
// the heap best-first; entries that do not match are skipped, so the cost is
// O((n + skipped)·log n). Filters that skip many accounts (tags, provider)
// cost more; the indexed attributes (endpoint, group, model) cost nothing.
func (s *scheduler) collect(cs *candidates, req *acquireState, n int) {
	if cs == nil || cs.len() == 0 {
		return
	}
	if n == 1 && !req.filtered() {
		if top := cs.items[0]; !req.excluded(top.view.ID) && (len(top.view.Families) == 0 || !top.view.ModelCooling(req.Model, s.cfg.now())) {
			s.top = append(s.top, top)
			return
		}
	}
	// Best-first walk of the heap with a small frontier of node positions
	// (reused: an allocation here would also grow the goroutine's stack).
	frontier := append(s.frontier[:0], 0)
	found := 0
	for len(frontier) > 0 && found < n {
		bi := 0
		for i := 1; i < len(frontier); i++ {
			if better(cs.items[frontier[i]], cs.items[frontier[bi]], cs.slot) {
				bi = i
			}
		}
		pos := frontier[bi]
		frontier[bi] = frontier[len(frontier)-1]
		frontier = frontier[:len(frontier)-1]
		e := cs.items[pos]
		if s.matches(e, req) {
			s.top = append(s.top, e)
			found++
		} else {
			s.skipped++
		}
		for _, ch := range [2]int{2*pos + 1, 2*pos + 2} {
			if ch < cs.len() {
				frontier = append(frontier, ch)
			}
		}
		if len(frontier) > 4096 {
			break // bound the walk: a filter that matches almost nothing is answered as "none"
		}
	}
	s.frontier = frontier[:0]
}

// grant forwards req to e's account and counts the lease as granted, so the
// next pick spreads: the account does not publish a lease it grants, and its
// views count the grant requests it has handled (onView). A policy that
// reads the counters judges e again here, where the account's publish would
// have made it.
//
// The grant goes out first and e is re-filed (and re-judged) after, off the
// caller's wait: the scheduler handles one message at a time, so the next
// pick sees e re-filed all the same, and req's limit is the verdict's at
// the pick. A grant to a local account whose mailbox is idle is
// handled on this goroutine (mailbox.runHere): the caller is spared the hop
// to a pool worker, and its wake-up.
func (s *scheduler) grant(c *mailCtx, e *entry, req *acquireState) {
	if e.owner == nil && e.box != nil && e.box.retired.Load() {
		// The account is being removed (pool.stop): its mailbox would drop
		// the grant once stopped, and the caller wait out its MaxWait. The
		// request comes back as refused, behind the removal the pool sent
		// when it retired the mailbox, and is picked again without it.
		c.box.send(&schedRefused{req: req, view: e.view, box: e.box}, nil)
		return
	}
	s.grants++
	s.stats.Grants++
	e.lastGrant = s.grants
	e.sent++
	e.extra++
	req.limit = e.v[req.slot].limit
	switch {
	case e.owner != nil:
		s.grantRemote(c, e, req)
	case e.box != nil:
		if !e.box.runHere(accountGrant{req: req}, c.pid) {
			e.box.send(accountGrant{req: req}, c.pid)
		}
	default:
		c.Send(e.pid, accountGrant{req: req})
	}
	// req is the account's (or the remote grant's) from here on.
	if s.reads&(scripts.FieldInFlight|scripts.FieldRequests) != 0 {
		s.index(e)
	} else {
		s.file(e, s.cfg.now())
	}
}
