package actors

import (
	"container/heap"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/upstream"
)

// SchedulerStats are the scheduler's counters, read with System.SchedulerStats.
type SchedulerStats struct {
	Accounts      int                   // accounts in the index
	Available     int                   // accounts that could take a lease now (by the scheduler's possibly stale view)
	Waiters       int                   // parked acquire requests
	Grants        uint64                // grant messages sent to accounts
	Refusals      uint64                // grants refused by accounts (stale view)
	Parked        uint64                // requests that had to wait
	Rejected      uint64                // requests answered with an AcquireError
	Rescores      uint64                // policy score calls
	Policy        string                // the active policy's name
	PolicyVersion uint64                // and version
	Canary        string                // the canary policy's name ("" when none)
	CanaryVersion uint64                // and version
	CanaryTiers   [scripts.NumTiers]int // accounts the canary accepts, by tier
	Rescoring     int                   // accounts still waiting for a rescore after a policy change
	Sticky        int                   // live stickiness keys
	Tiers         [scripts.NumTiers]int // accounts the policy accepts, by tier (healthy, warm, risky)
	Excluded      int                   // accounts the policy excludes (nil score)
}

// entry is the scheduler's record of one account.
type entry struct {
	idx       uint32
	view      View
	pid       *actor.PID
	v         [2]verdict // the policy's last verdict, and the canary's (while one runs)
	lastGrant uint64
	sent      uint64 // grant requests sent to the account (schedView.answered)
	keys      []routeKey
	terminal  bool   // counted as not live
	recheck   uint64 // generation of the pending recheck timer (0: none)
	policyGen uint64 // policy generation the score was computed with
}

// verdict is one policy's judgement of an account.
type verdict struct {
	scored Scored
	limit  int     // concurrency cap from the tier (<= view.MaxInFlight)
	tie    float64 // secondary key from the policy's tie_break (higher first)
}

// Slots of entry.v and scheduler.sets.
const (
	slotPolicy = 0
	slotCanary = 1
)

// schedulerConfig configures the scheduler actor.
type schedulerConfig struct {
	policy    Policy
	maxWaiter int // bound on parked requests across all queues
	log       *slog.Logger
	now       func() time.Time
	rand      *rand.Rand // for top-k jitter; seeded by the caller
}

// scheduler is the actor that picks accounts. It owns the index of account
// views, the candidate heaps, the wait queues, the stickiness map and the
// recheck timers; it never blocks.
type scheduler struct {
	cfg    schedulerConfig
	policy Policy
	canary Policy         // nil: no canary
	reads  scripts.Fields // the counters policy and canary read (Policy.Reads), kept by setReads
	// canaryReady is set once the canary's sets are built (after its full
	// rescore); until then its requests are judged by the policy.
	canaryReady bool
	policyGen   uint64
	byID        map[string]*entry
	next        uint32
	sets        [2]map[routeKey]*candidates // by slot; membership counters live in slot 0's
	queues      map[routeKey]*waitQueue
	waiting     int
	grants      uint64
	stats       SchedulerStats
	sweeper     actor.SendRepeater
	ticker      actor.SendRepeater
	rechecks    recheckHeap
	recheckN    uint64
	rescore     []*entry // entries left to rescore after a policy change
	sticky      map[string]stickyEntry
	top         []*entry                   // scratch for top-k
	skipped     int                        // scratch: candidates the last collect skipped
	frontier    []int                      // scratch: collect's heap positions
	owned       map[string][]*acquireState // account ID → requests waiting for it alone (owned.go)
}

type stickyEntry struct {
	id      string
	expires time.Time
}

func newScheduler(cfg schedulerConfig) actor.Producer {
	return func() actor.Receiver {
		if cfg.rand == nil {
			cfg.rand = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x7472_6f75_7065))
		}
		sc := &scheduler{
			cfg:    cfg,
			policy: cfg.policy,
			byID:   make(map[string]*entry),
			sets:   [2]map[routeKey]*candidates{make(map[routeKey]*candidates), make(map[routeKey]*candidates)},
			queues: make(map[routeKey]*waitQueue),
			sticky: make(map[string]stickyEntry),
		}
		sc.policy = sc.withLog(sc.policy)
		sc.setReads()
		return sc
	}
}

// rescoreChunk is how many accounts one message rescores after a policy
// change, so picks interleave with a full rescore of a large pool.
const rescoreChunk = 2000

// Receive handles scheduler messages. The two of every request (an
// acquire, the view its release publishes) are handled here, the rest in
// receiveRare: hollywood runs each message of an idle mailbox on a new
// goroutine with a 2 KiB stack, and a request's path stays within it only
// while the frames under Receive are small (docs/benchmarks.md).
func (s *scheduler) Receive(c *actor.Context) {
	switch m := c.Message().(type) {
	case schedAcquire:
		s.acquire(c, m.req)
	case *schedView:
		s.onView(c, &m.view, m.pid, m.answered)
	default:
		s.receiveRare(c, m)
	}
}

// receiveRare handles the scheduler's other messages.
//
//go:noinline
func (s *scheduler) receiveRare(c *actor.Context, msg any) {
	switch m := msg.(type) {
	case actor.Started:
		s.sweeper = c.SendRepeat(c.PID(), schedSweep{}, time.Second)
		s.ticker = c.SendRepeat(c.PID(), schedTick{}, 250*time.Millisecond)
	case actor.Stopped:
		s.sweeper.Stop()
		s.ticker.Stop()
	case *schedRefused:
		s.stats.Refusals++
		s.onView(c, &m.view, nil, m.answered)
		if m.req.state.Load() == acqPending {
			m.req.tries++
			s.acquire(c, m.req)
		}
	case schedRemove:
		s.remove(m.id)
	case schedSweep:
		s.sweep()
	case schedTick:
		s.runRechecks(c)
	case schedPolicy:
		s.setPolicy(c, m.policy)
	case schedCanary:
		s.setCanary(c, m.policy)
	case schedRescore:
		s.rescoreSome(c)
	case schedScores:
		m.reply <- s.scores()
	case schedPolicyState:
		s.replyPolicyState(m.reply)
	case schedStats:
		s.replyStats(m.reply)
	}
}

// replyPolicyState sends the policies and the rescore progress to reply.
// (Replies are built outside Receive, so its stack frame, which every
// message pays for, stays small.)
func (s *scheduler) replyPolicyState(reply chan PolicyState) {
	st := PolicyState{Policy: s.policy.Name(), PolicyVersion: s.policy.Version(), Rescoring: len(s.rescore)}
	if s.canary != nil {
		st.Canary = s.canary.Name()
	}
	reply <- st
}

// replyStats sends the counters with the index's current figures to reply.
func (s *scheduler) replyStats(reply chan SchedulerStats) {
	st := s.stats
	st.Accounts = len(s.byID)
	st.Waiters = s.waiting
	st.Policy, st.PolicyVersion = s.policy.Name(), s.policy.Version()
	if s.canary != nil {
		st.Canary, st.CanaryVersion = s.canary.Name(), s.canary.Version()
	}
	st.Rescoring = len(s.rescore)
	st.Sticky = len(s.sticky)
	avail, now := 0, s.cfg.now()
	for _, e := range s.byID {
		if s.canary != nil && e.v[slotCanary].scored.OK {
			st.CanaryTiers[min(int(e.v[slotCanary].scored.Tier), scripts.NumTiers-1)]++
		}
		if !e.v[slotPolicy].scored.OK {
			st.Excluded++
			continue
		}
		st.Tiers[min(int(e.v[slotPolicy].scored.Tier), scripts.NumTiers-1)]++
		if e.available(now, slotPolicy) {
			avail++
		}
	}
	st.Available = avail
	reply <- st
}

// available reports whether e can take one more lease under slot sl's tier cap.
func (e *entry) available(now time.Time, sl int) bool {
	return e.view.Available(now) && e.view.InFlight < e.v[sl].limit
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
// requests) on top of v's counters, which v itself must keep (it is shared
// with readers).
func (s *scheduler) onView(c *actor.Context, v *View, pid *actor.PID, answered uint64) {
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
	pending := 0
	if e.sent > answered {
		pending = int(e.sent - answered)
	}
	old, oldProvider := e.keys, e.view.Provider
	reconfigured := e.keys == nil || v.ConfigGen != e.view.ConfigGen
	rescore := reconfigured || e.policyGen != s.policyGen || s.scoreInputsChanged(&e.view, v, pending)
	e.view = *v
	e.view.InFlight += pending
	e.view.Requests += uint64(pending)
	if reconfigured {
		e.keys = keysFor(&e.view)
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
// with pending more leases in flight and requests, differently from ov: any
// field other than the counters differs, or a counter the policies read
// (Policy.Reads) does. A lease granted or released changes only counters, so
// under a policy that reads none of them it costs no score() call. Slices
// are compared by identity: a published view's slices are never mutated,
// only replaced.
func (s *scheduler) scoreInputsChanged(ov, nv *View, pending int) bool {
	if ov.Status != nv.Status || ov.CooldownUntil != nv.CooldownUntil || ov.CooldownReason != nv.CooldownReason ||
		ov.MaxInFlight != nv.MaxInFlight || ov.Priority != nv.Priority || ov.Plan != nv.Plan ||
		ov.ID != nv.ID || ov.Name != nv.Name || ov.Provider != nv.Provider || ov.Group != nv.Group ||
		ov.LastFailure != nv.LastFailure || ov.LastTimeout != nv.LastTimeout ||
		!sameSlice(ov.Tags, nv.Tags) || !sameSlice(ov.Windows, nv.Windows) {
		return true
	}
	changed := when(ov.InFlight != nv.InFlight+pending, scripts.FieldInFlight) |
		when(ov.Requests != nv.Requests+uint64(pending), scripts.FieldRequests) |
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
	v.scored = p.Score(&e.view, now)
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
	e.v[sl].tie = tieKey(p.Knobs(), &e.view)
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
func tieKey(k *scripts.Knobs, v *View) float64 {
	for _, t := range k.TieBreak {
		switch t {
		case scripts.TieLeastInflight:
			if v.MaxInFlight > 0 {
				return -float64(v.InFlight) / float64(v.MaxInFlight)
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
func (s *scheduler) runRechecks(c *actor.Context) {
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
func (s *scheduler) setPolicy(c *actor.Context, p Policy) {
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
func (s *scheduler) setCanary(c *actor.Context, p Policy) {
	s.canary, s.canaryReady = s.withLog(p), false
	s.setReads()
	s.sets[slotCanary] = make(map[routeKey]*candidates)
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
func (s *scheduler) rescoreSome(c *actor.Context) {
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
	delete(s.byID, id)
}

// maxTries bounds the refusals one request may meet before it is parked.
const maxTries = 8

// acquire picks the best available candidate for req and asks its account for
// a lease, or parks req, or fails it. (Kept small, as Receive: see there.)
func (s *scheduler) acquire(c *actor.Context, req *acquireState) {
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

// park queues req to wait for capacity, or fails it when waiting cannot
// help (no account, none live, no wait allowed, queues full).
//
//go:noinline
func (s *scheduler) park(c *actor.Context, req *acquireState) {
	if req.Only != "" {
		s.parkOwned(req) // its own queue: it must not hold up the shared ones (owned.go)
		return
	}
	exact, wild := s.sets[slotPolicy][req.key], s.sets[slotPolicy][routeKey{req.key.group, anyModel}]
	members, live := 0, 0
	for _, cs := range [2]*candidates{exact, wild} {
		switch {
		case cs == nil:
		case req.Native && req.Endpoint > 0 && int(req.Endpoint) < numEndpoints:
			members += cs.native[req.Endpoint]
			live += cs.nativeLive[req.Endpoint]
		default:
			members += cs.members
			live += cs.live
		}
	}
	// Accounts this request already tried are not coming back for it: if
	// they are all that is live, waiting cannot help.
	for _, id := range req.Exclude {
		if e := s.byID[id]; e != nil && !e.terminal && s.inSet(e, req) && (!req.Native || upstream.Supports(e.view.Provider, req.Endpoint)) {
			live--
		}
	}
	switch {
	case members == 0:
		s.reject(req, &AcquireError{Err: ErrNoAccount})
	case live <= 0:
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
		s.notifyParked(req)
	}
}

// notifyParked tells req's caller, once, that the request waits: the caller
// arms its timer for the rest of MaxWait then (System.Acquire). The reply
// channel holds this notice and the reply, so the send never blocks.
func (s *scheduler) notifyParked(req *acquireState) {
	if !req.notified {
		req.notified = true
		req.reply <- acquireReply{parked: true}
	}
}

func (s *scheduler) reject(req *acquireState, err *AcquireError) {
	if req.fail(err) {
		s.stats.Rejected++
	}
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
// matches req, recording the pick as via; else nil.
func (s *scheduler) pinned(id string, via Via, req *acquireState, sl int, pol Policy, now time.Time) *entry {
	e := s.byID[id]
	if e == nil || !e.candidate(now, sl) || !s.matches(e, req) || !s.inSet(e, req) {
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

// matches applies req's exclusions and route filters to e.
func (s *scheduler) matches(e *entry, req *acquireState) bool {
	if req.excluded(e.view.ID) {
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
		if !req.excluded(cs.items[0].view.ID) {
			s.top = append(s.top, cs.items[0])
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
func (s *scheduler) grant(c *actor.Context, e *entry, req *acquireState) {
	s.grants++
	s.stats.Grants++
	e.lastGrant = s.grants
	e.sent++
	e.view.InFlight++
	e.view.Requests++
	req.limit = e.v[req.slot].limit
	if s.reads&(scripts.FieldInFlight|scripts.FieldRequests) != 0 {
		s.index(e)
	} else {
		s.file(e, s.cfg.now())
	}
	c.Send(e.pid, accountGrant{req: req})
}

// wake serves parked requests that e's capacity can now take, oldest first.
func (s *scheduler) wake(c *actor.Context, e *entry) {
	if len(s.owned) > 0 {
		s.wakeOwned(c, e)
	}
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
	for k, st := range s.sticky {
		if !now.Before(st.expires) {
			delete(s.sticky, k)
		}
	}
	s.sweepOwned(now)
	for k, q := range s.queues {
		q.each(func(r *acquireState) {
			if !r.deadline.IsZero() && now.After(r.deadline) {
				s.reject(r, &AcquireError{Err: ErrBusy, RetryAfter: time.Second})
			}
		})
		s.waiting -= q.prune()
		if q.len() == 0 {
			delete(s.queues, k)
		}
	}
}
