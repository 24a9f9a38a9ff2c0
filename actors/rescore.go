package actors

import (
	"container/heap"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/scripts"
)

// rescoreChunk is how many accounts one message rescores after a policy
// change, so picks interleave with a full rescore of a large pool.
const rescoreChunk = 2000

// available reports whether e can take one more lease under slot sl's tier cap.
func (e *entry) available(now time.Time, sl int) bool {
	n := e.inFlight()
	return n < e.view.MaxInFlight && n < e.v[sl].limit && e.view.Usable(now)
}

// inFlight is the leases e's account holds by the scheduler's count.
func (e *entry) inFlight() int { return e.view.InFlight + e.extra }

// noView is the view of an entry no view has been installed in yet.
var noView View

// counted returns e's view with the scheduler's counters (inFlight), which
// policies judge: e.view itself when they are its own, else a copy in
// s.counts, valid until the next call.
func (s *scheduler) counted(e *entry) *View {
	if e.extra == 0 {
		return e.view
	}
	s.counts = *e.view
	s.counts.InFlight += e.extra
	s.counts.Requests += uint64(e.extra)
	return &s.counts
}

// rewrite installs a copy of e's view changed by fn (e.view is shared and
// never written).
func (e *entry) rewrite(fn func(v *View)) {
	v := *e.view
	fn(&v)
	e.view = &v
}

// candidate reports whether slot sl's policy accepts e and e is available.
func (e *entry) candidate(now time.Time, sl int) bool {
	return e.v[sl].scored.OK && e.available(now, sl)
}

// wakeable reports whether e could serve a waiter of either slot.
func (s *scheduler) wakeable(e *entry, now time.Time) bool {
	return e.candidate(now, slotPolicy) || (s.canary != nil && e.candidate(now, slotCanary))
}

// keysFor lists the candidate sets an account belongs to: one per model it
// serves, whatever its provider's protocol.
func keysFor(v *View) []routeKey {
	if len(v.Models) == 0 {
		return []routeKey{{v.Group, anyModel}}
	}
	keys := make([]routeKey, 0, len(v.Models))
	for _, m := range v.Models {
		keys = append(keys, routeKey{v.Group, m})
	}
	return keys
}

func terminal(st Status) bool {
	return st == StatusDisabled || st == StatusUnauthorized || st == StatusBanned
}

// set returns the candidate set of k in slot 0, which also keeps k's membership counters.
func (s *scheduler) set(k routeKey) *candidates { return s.slotSet(slotPolicy, k) }

func (s *scheduler) slotSet(sl int, k routeKey) *candidates {
	c := s.sets[sl][k]
	if c == nil {
		c = newCandidates(sl)
		s.sets[sl][k] = c
	}
	return c
}

// onView installs a newer view of an account and restores the index. The
// account had handled answered of the grant requests sent to it; those it
// had not are leases that may be granted, so they count as in flight (and as
// requests) on top of v's counters (entry.extra). v is kept, not copied: it
// must never be written again (it is shared with readers).
func (s *scheduler) onView(c *mailCtx, v *View, pid *actor.PID, box *mailbox, answered uint64) {
	if box != nil && box.retired.Load() {
		return // from the actor of an account removed meanwhile (pool.stop)
	}
	e := s.byID[v.ID]
	if e == nil {
		if pid == nil {
			return // a refusal from an account removed meanwhile
		}
		e = &entry{idx: s.next, view: &noView, pid: pid, box: box}
		s.next++
		s.byID[v.ID] = e
	} else if pid != nil && e.owner != nil {
		s.local(e) // it runs here now: its own actor's view replaces its old owner's
		e.pid, e.box = pid, box
	} else if v.Version < e.view.Version {
		return // out of order; a newer view is installed
	} else if pid != nil {
		e.pid, e.box = pid, box
	}
	pending := 0
	if e.sent > answered {
		pending = int(e.sent - answered)
	}
	old, oldProvider := e.keys, e.view.Provider
	reconfigured := e.keys == nil || v.ConfigGen != e.view.ConfigGen
	rescore := reconfigured || e.policyGen != s.policyGen || s.scoreInputsChanged(e, v, pending)
	e.view, e.extra = v, pending
	if reconfigured {
		e.keys = keysFor(e.view)
	}
	if reconfigured && (!sameKeys(old, e.keys) || oldProvider != v.Provider) {
		for _, k := range old {
			cs := s.set(k)
			cs.remove(e)
			if alt := s.sets[slotCanary][k]; alt != nil {
				alt.remove(e)
			}
			cs.count(oldProvider, -1, !e.terminal)
		}
		for _, k := range e.keys {
			s.set(k).count(v.Provider, 1, !e.terminal)
		}
	}
	if t := terminal(v.Status); t != e.terminal {
		d := 1
		if t {
			d = -1
		}
		for _, k := range e.keys {
			s.set(k).countLive(v.Provider, d)
		}
		e.terminal = t
	}
	if rescore {
		s.index(e)
	} else {
		s.file(e, s.cfg.now()) // the verdicts stand; availability and tie-break may not
	}
	if s.wakeable(e, s.cfg.now()) {
		s.wake(c, e)
	}
}

// scoreInputsChanged reports whether the running policies could judge nv,
// with pending more leases in flight and requests, differently from e's
// view with its counters: any
// field other than the counters differs, or a counter the policies read
// (Policy.Reads) does. A lease granted or released changes only counters, so
// under a policy that reads none of them it costs no score() call. Slices
// are compared by identity: a published view's slices are never mutated,
// only replaced.
func (s *scheduler) scoreInputsChanged(e *entry, nv *View, pending int) bool {
	ov := e.view
	if ov.Status != nv.Status || ov.CooldownUntil != nv.CooldownUntil || ov.CooldownReason != nv.CooldownReason ||
		ov.MaxInFlight != nv.MaxInFlight || ov.Priority != nv.Priority || ov.Plan != nv.Plan ||
		ov.ID != nv.ID || ov.Name != nv.Name || ov.Provider != nv.Provider || ov.Group != nv.Group ||
		ov.LastFailures != nv.LastFailures ||
		!sameSlice(ov.Tags, nv.Tags) || !sameSlice(ov.Windows, nv.Windows) ||
		ov.ActiveLimit != nv.ActiveLimit || ov.Credits != nv.Credits || !sameSlice(ov.Families, nv.Families) {
		return true
	}
	changed := when(e.inFlight() != nv.InFlight+pending, scripts.FieldInFlight) |
		when(ov.Requests+uint64(e.extra) != nv.Requests+uint64(pending), scripts.FieldRequests) |
		when(ov.Successes != nv.Successes, scripts.FieldSuccesses) |
		when(ov.Failures != nv.Failures, scripts.FieldFailures) |
		when(ov.SuccessStreak != nv.SuccessStreak, scripts.FieldSuccessStreak) |
		when(ov.FailureStreak != nv.FailureStreak, scripts.FieldFailureStreak) |
		when(ov.EWMASuccess != nv.EWMASuccess, scripts.FieldEWMASuccess) |
		when(ov.EWMALatency != nv.EWMALatency, scripts.FieldEWMALatency) |
		when(ov.EWMATTFT != nv.EWMATTFT, scripts.FieldEWMATTFT)
	return changed&s.reads != 0
}

// setReads notes the counters the running policies read (Policy.Reads),
// after either changed: every view and every grant asks.
func (s *scheduler) setReads() {
	s.reads = s.policy.Reads()
	if s.canary != nil {
		s.reads |= s.canary.Reads()
	}
}

// when is f if cond holds, else no field.
func when(cond bool, f scripts.Fields) scripts.Fields {
	if cond {
		return f
	}
	return 0
}

// sameSlice reports whether a and b are the same slice (same array, length).
func sameSlice[T any](a, b []T) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
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
	s.judgeAll(e, now)
	s.file(e, now)
}

// judgeAll stores the verdicts of the running policies on e and arms its
// recheck timer; it does not touch the candidate sets.
func (s *scheduler) judgeAll(e *entry, now time.Time) {
	s.stats.Rescores++
	recheck := s.judge(e, slotPolicy, s.policy, now)
	if s.canary != nil {
		s.stats.Rescores++
		if r := s.judge(e, slotCanary, s.canary, now); r > 0 && (recheck == 0 || r < recheck) {
			recheck = r
		}
	}
	e.policyGen = s.policyGen
	if recheck > 0 {
		s.recheckN++
		e.recheck = s.recheckN
		heap.Push(&s.rechecks, recheckItem{due: now.Add(recheck), e: e, gen: e.recheck})
	} else {
		e.recheck = 0
	}
}

// judge stores p's verdict on e in slot sl and returns its recheck_after.
func (s *scheduler) judge(e *entry, sl int, p Policy, now time.Time) time.Duration {
	v := &e.v[sl]
	v.scored = p.Score(s.counted(e), now)
	v.band = p.Knobs().Band(v.scored.Score)
	v.limit = e.view.MaxInFlight
	if v.scored.OK {
		v.limit = p.Knobs().Limit(v.scored.Tier, e.view.MaxInFlight)
	}
	return v.scored.RecheckAfter
}

// file puts e in, or takes it out of, its candidate sets of every running
// slot by availability.
func (s *scheduler) file(e *entry, now time.Time) {
	s.fileSlot(e, slotPolicy, s.policy, now)
	if s.canary != nil {
		s.fileSlot(e, slotCanary, s.canary, now)
	}
}

func (s *scheduler) fileSlot(e *entry, sl int, p Policy, now time.Time) {
	e.v[sl].tie = tieKey(p.Knobs(), e.view, e.inFlight())
	in := e.candidate(now, sl)
	for _, k := range e.keys {
		cs := s.slotSet(sl, k)
		if in {
			cs.set(e)
		} else {
			cs.remove(e)
		}
	}
}

// tieKey turns the first of the policy's tie-break rules that is not
// least_recent into a number (higher first); least_recent is the heap's own
// next key, and join order its last.
func tieKey(k *scripts.Knobs, v *View, inFlight int) float64 {
	for _, t := range k.TieBreak {
		switch t {
		case scripts.TieLeastInflight:
			if v.MaxInFlight > 0 {
				return -float64(inFlight) / float64(v.MaxInFlight)
			}
			return 0
		case scripts.TiePriority:
			return float64(v.Priority)
		case scripts.TieLeastRecent:
			return 0
		}
	}
	return 0
}

// runRechecks rescores the accounts whose recheck_after has passed.
func (s *scheduler) runRechecks(c *mailCtx) {
	now := s.cfg.now()
	for len(s.rechecks) > 0 && !s.rechecks[0].due.After(now) {
		it := heap.Pop(&s.rechecks).(recheckItem)
		if it.e.recheck != it.gen || s.byID[it.e.view.ID] != it.e {
			continue // superseded by a newer score, or removed
		}
		s.index(it.e)
		if s.wakeable(it.e, now) {
			s.wake(c, it.e)
		}
	}
}

// withLog gives a Lua policy the scheduler's logger for its score errors.
func (s *scheduler) withLog(p Policy) Policy {
	if lp, ok := p.(*LuaPolicy); ok && lp != nil {
		lp.log = s.cfg.log
	}
	return p // nil stays nil
}

// setPolicy swaps the policy and rescores the pool in chunks: picks keep
// being served between chunks, with old scores for the accounts not yet
// rescored (stale ordering, never over-admission).
func (s *scheduler) setPolicy(c *mailCtx, p Policy) {
	s.policy = s.withLog(p)
	s.setReads()
	s.policyGen++
	s.sticky = make(map[string]stickyEntry)
	s.rescore = s.rescore[:0]
	for _, e := range s.byID {
		s.rescore = append(s.rescore, e)
	}
	s.cfg.log.Info("routing policy active", "policy", p.Name(), "version", p.Version(), "accounts_indexed_so_far", len(s.rescore))
	s.rescoreSome(c)
}

// setCanary installs p as the canary (nil removes it). Requests marked
// Canary are judged by it from then on, with the pool rescored in chunks as
// after a policy swap (until an account is rescored it is no canary
// candidate); removing it drops the canary's heaps at once.
func (s *scheduler) setCanary(c *mailCtx, p Policy) {
	s.canary, s.canaryReady = s.withLog(p), false
	s.setReads()
	s.sets[slotCanary] = make(map[routeKey]*candidates)
	for _, e := range s.byID {
		e.leftSlot(slotCanary) // the old heaps are dropped whole
	}
	if p == nil {
		s.cfg.log.Info("routing canary removed")
		return
	}
	for _, e := range s.byID {
		e.v[slotCanary] = verdict{}
	}
	s.policyGen++
	s.rescore = s.rescore[:0]
	for _, e := range s.byID {
		s.rescore = append(s.rescore, e)
	}
	s.cfg.log.Info("routing canary active", "policy", p.Name(), "version", p.Version())
	s.rescoreSome(c)
}

// rescoreSome rescores the next chunk of a full rescore (rescoreNext) and,
// after the last one, serves the waiters the new order admits.
func (s *scheduler) rescoreSome(c *mailCtx) {
	if !s.rescoreNext(s.cfg.now()) {
		c.Send(c.PID(), schedRescore{})
		return
	}
	for k := range s.queues {
		s.drain(c, k)
	}
}

// rescoreNext rescores and re-files the next chunk of accounts; it reports
// whether the rescore is complete (then the canary, if any, is ready).
// Picks between chunks see new scores for the accounts done and old ones
// for the rest: stale order, never over-admission.
func (s *scheduler) rescoreNext(now time.Time) bool {
	n := min(rescoreChunk, len(s.rescore))
	for _, e := range s.rescore[len(s.rescore)-n:] {
		if s.byID[e.view.ID] == e && e.policyGen != s.policyGen {
			s.judgeAll(e, now)
			s.file(e, now)
		}
	}
	clear(s.rescore[len(s.rescore)-n:])
	s.rescore = s.rescore[:len(s.rescore)-n]
	if len(s.rescore) > 0 {
		return false
	}
	s.canaryReady = s.canary != nil
	return true
}

func (s *scheduler) remove(id string) {
	e := s.byID[id]
	if e == nil {
		return
	}
	for _, k := range e.keys {
		cs := s.set(k)
		cs.remove(e)
		if alt := s.sets[slotCanary][k]; alt != nil {
			alt.remove(e)
		}
		cs.count(e.view.Provider, -1, !e.terminal)
	}
	if e.owner != nil && s.remote != nil {
		s.remote.count.Add(-1)
		s.remote.views.Delete(id)
	}
	delete(s.byID, id)
}

// recheckItem is a pending rescore of e at due; gen must still match e.recheck.
type recheckItem struct {
	due time.Time
	e   *entry
	gen uint64
}

// recheckHeap is a min-heap of rechecks by due time (container/heap).
type recheckHeap []recheckItem

func (h recheckHeap) Len() int           { return len(h) }
func (h recheckHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h recheckHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *recheckHeap) Push(x any)        { *h = append(*h, x.(recheckItem)) }
func (h *recheckHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = recheckItem{}
	*h = old[:len(old)-1]
	return it
}
