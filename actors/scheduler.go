package actors

import (
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/scripts"
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
	idx      uint32
	terminal bool // counted as not live; beside idx, in its padding (8 bytes an entry)
	// view is the account's last view: the one it published, shared with
	// the readers' snapshot (or a copy of its owner's, for a remote
	// account), so it is never written here; a change installs a new one.
	// At 10,000 accounts a copy of it each was 6 MB of live heap.
	view *View
	// extra are the leases the scheduler counts beyond view's: grants sent
	// that the account had not handled when it published view, and grants
	// since. They count in flight and as requests (inFlight, counted).
	extra     int
	pid       *actor.PID
	box       *mailbox   // the account's mailbox (grants skip the registry)
	v         [2]verdict // the policy's last verdict, and the canary's (while one runs)
	lastGrant uint64
	sent      uint64 // grant requests sent to the account (schedView.answered)
	keys      []routeKey
	heaps     []heapPos // where the entry is in candidate heaps (index.go)
	recheck   uint64    // generation of the pending recheck timer (0: none)
	policyGen uint64    // policy generation the score was computed with
	// owner is set while the account runs on another instance
	// (remote.go); nil here. Apart, so that the entries of local accounts,
	// most of them, are 224 bytes rather than 256.
	owner *entryOwner
}

// entryOwner is where a remote entry's account runs.
type entryOwner struct {
	name string    // the member that owns the account
	seen time.Time // its last view from that member
}

// ownerName returns the member that owns e's account, "" when it runs here.
func (e *entry) ownerName() string {
	if e.owner == nil {
		return ""
	}
	return e.owner.name
}

// verdict is one policy's judgement of an account.
type verdict struct {
	scored Scored
	band   float64 // the score as the heap compares it (scripts.Knobs.Band)
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
	// restarted, called when a restarted scheduler starts, has every
	// account publish its view again (poolRepublish).
	restarted func()
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
	remote      *remoteSide                // routing across instances (remote.go); nil: local accounts only
	counts      View                       // scratch: a view with the scheduler's counters (counted)
	restarted   bool                       // made after a panic: Started asks the accounts for their views
}

type stickyEntry struct {
	id      string
	expires time.Time
}

// seededRand returns the jitter's source: seeded with seed, or with the
// clock when seed is 0.
func seededRand(seed uint64) *rand.Rand {
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return rand.New(rand.NewPCG(seed, 0x7472_6f75_7065))
}

// A scheduler restarted after a panic (mailbox.recovered) starts from an
// empty index: it keeps the policy and the canary last set (not the ones
// it started with) and has cfg.restarted ask every account to publish its view again, so
// the pool is indexed again at once rather than as each account next
// changes (an idle one might not for a long time).
func newScheduler(cfg schedulerConfig) func() mailHandler {
	var last *scheduler // the handler that ran before, on the mailbox's turn
	return func() mailHandler {
		if cfg.rand == nil {
			cfg.rand = seededRand(0)
		}
		policy := cfg.policy
		if last != nil {
			policy = last.policy // already wrapped by withLog
		}
		sc := &scheduler{
			cfg:       cfg,
			policy:    policy,
			restarted: last != nil,
			byID:      make(map[string]*entry),
			sets:      [2]map[routeKey]*candidates{make(map[routeKey]*candidates), make(map[routeKey]*candidates)},
			queues:    make(map[routeKey]*waitQueue),
			sticky:    make(map[string]stickyEntry),
		}
		if last == nil {
			sc.policy = sc.withLog(sc.policy)
		} else {
			// Every account's view comes back through onView, which judges
			// it by both, so the canary's sets fill as the policy's do.
			sc.canary, sc.canaryReady = last.canary, last.canary != nil
			if sc.remote = last.remote; sc.remote != nil {
				// Routing across instances goes on; the other instances'
				// accounts come back with their owners' next views.
				sc.remote.count.Store(0)
				sc.remote.views.Clear()
			}
		}
		sc.setReads()
		last = sc
		return sc
	}
}

// receive handles scheduler messages, on its mailbox's goroutine
// (mailbox.go). The two of every request (an acquire, the view its release
// publishes) are handled here, the rest in receiveRare, which keeps this
// frame small (it mattered when each message ran on a fresh 2 KiB stack;
// docs/benchmarks.md).
func (s *scheduler) receive(c *mailCtx, msg any) {
	switch m := msg.(type) {
	case schedAcquire:
		s.acquire(c, m.req)
	case *schedView:
		s.onView(c, &m.view, m.pid(), m.box, m.answered)
	default:
		s.receiveRare(c, m)
	}
}

// receiveRare handles the scheduler's other messages.
//
//go:noinline
func (s *scheduler) receiveRare(c *mailCtx, msg any) {
	switch m := msg.(type) {
	case actor.Started:
		s.sweeper = c.SendRepeat(c.PID(), schedSweep{}, time.Second)
		s.ticker = c.SendRepeat(c.PID(), schedTick{}, 250*time.Millisecond)
		if s.restarted && s.cfg.restarted != nil {
			s.cfg.log.Warn("scheduler restarted: its index is rebuilt from the accounts' views")
			s.cfg.restarted()
		}
	case actor.Stopped:
		s.sweeper.Stop()
		s.ticker.Stop()
	case *schedRefused:
		s.stats.Refusals++
		s.onView(c, m.view, nil, m.box, m.answered)
		if m.req.state.Load() == acqPending {
			m.req.tries++
			s.acquire(c, m.req)
		}
	case schedRemove:
		if e := s.byID[m.id]; e != nil && (m.box == nil || e.box == nil || e.box == m.box) {
			s.remove(m.id)
		}
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
	default:
		s.receiveRemote(c, m)
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
