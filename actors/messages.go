package actors

import (
	"sync"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Messages are small structs handled in each actor's Receive type switch.
// They are grouped here by actor family; none of them is exported because
// callers use the System methods, which build them.

// --- pool supervisor ---------------------------------------------------------

// poolPut adds an account or replaces its configuration.
type poolPut struct{ account storage.Account }

// poolRemove stops the account's actor and drops it from the scheduler.
type poolRemove struct{ id string }

// poolStopAll stops every account actor; done is closed when they have stopped.
type poolStopAll struct{ done chan struct{} }

// poolRepublish has every account publish its view again: a restarted
// scheduler starts from an empty index.
type poolRepublish struct{}

// accountRepublish asks the account to publish its view again.
type accountRepublish struct{}

// --- account -----------------------------------------------------------------

// accountGrant asks the account to grant a lease for the waiting request,
// below min(req.limit, its own limit). Sent by the scheduler; the account
// answers the request directly, or sends schedRefused back when it cannot
// (the scheduler's view was stale). One pointer, so sending it allocates
// nothing.
type accountGrant struct{ req *acquireState }

// accountRelease ends a lease with its outcome. Sent as a pointer, so the
// account does not copy the outcome into its Receive frame.
type accountRelease struct {
	leaseID uint64
	outcome Outcome
}

// accountUpdate replaces the account's configuration (credentials, limits, models).
type accountUpdate struct {
	account   storage.Account
	transport upstream.Transport
}

// accountCooldownEnd is the account's own timer: the cooldown of generation gen is over.
type accountCooldownEnd struct{ gen uint64 }

// accountRefreshDue is the account's refresh timer of generation gen (or,
// with gen 0, a request to refresh now).
type accountRefreshDue struct{ gen uint64 }

// accountRefreshed is the refresh goroutine's result: the account as stored
// with its new credentials, or the error.
type accountRefreshed struct {
	account storage.Account
	adopted bool // another instance had refreshed already; account is what it stored
	err     error
}

// accountRateLimits carries the usage limits an upstream answer reported
// (x-codex-* headers or a codex.rate_limits event), received at at, for a
// request for model ("" when unknown).
type accountRateLimits struct {
	limits upstream.RateLimits
	at     time.Time
	model  string
}

// poolForward hands msg to the account actor with the given id, if any.
type poolForward struct {
	id  string
	msg any
}

// --- scheduler ---------------------------------------------------------------

// schedAcquire asks for a lease for one request.
type schedAcquire struct{ req *acquireState }

// schedView is an account's state after a change; it supersedes older views.
// answered counts the grant requests the account had handled (granted,
// refused or found abandoned) when it published: the scheduler adds the
// grants it sent since to the view's counters, as a granted lease is not
// published (account.grant). The account's PID is its mailbox's (pid):
// 368 + 16 bytes is the 384-byte size class, which every account keeps one
// of as its published view (issue 21).
type schedView struct {
	view     View
	box      *mailbox // the account's mailbox, which grants are sent to
	answered uint64
}

// pid returns the PID of the account that sent m; nil without a mailbox.
func (m *schedView) pid() *actor.PID {
	if m.box == nil {
		return nil
	}
	return m.box.PID()
}

// schedRefused returns a request the account could not serve, with its
// current view and answered count (as in schedView).
type schedRefused struct {
	req      *acquireState
	view     *View // never written again: the scheduler keeps it
	answered uint64
	box      *mailbox // the refusing account's: a retired one's view is dropped
}

// schedRemove drops an account from the index: the entry of box's actor
// (any entry when box is nil).
type schedRemove struct {
	id  string
	box *mailbox
}

// schedSweep is the scheduler's timer: drop abandoned or expired waiters
// and expired stickiness keys.
type schedSweep struct{}

// schedTick is the scheduler's fast timer: run due rechecks.
type schedTick struct{}

// schedPolicy swaps the routing policy.
type schedPolicy struct{ policy Policy }

// schedCanary installs (or, nil, removes) the canary policy.
type schedCanary struct{ policy Policy }

// schedRescore continues a chunked rescore after a policy swap.
type schedRescore struct{}

// schedPolicyState asks for the policies and rescore progress (O(1)).
type schedPolicyState struct{ reply chan PolicyState }

// schedStats asks for the scheduler's counters; the reply goes to the channel.
type schedStats struct{ reply chan SchedulerStats }

// --- usage recorder -----------------------------------------------------------

// usageRecord adds one record to the current batch. The record is one of
// usageRecs' (System.Record), which the recorder puts back once it has
// copied it: a message of one pointer goes into the mailbox's interface
// without an allocation, where the 256-byte record boxed was one a request
// (docs/benchmarks.md, issue 21).
type usageRecord struct{ rec *storage.UsageRecord }

// usageRecs holds the records usageRecord messages carry.
var usageRecs = sync.Pool{New: func() any { return new(storage.UsageRecord) }}

// usageErrors adds a request's failed attempts to the current batch.
type usageErrors struct{ events []storage.ErrorEvent }

// usageBatch is what the recorder hands its writer: records, then error events.
type usageBatch struct {
	recs   []storage.UsageRecord
	events []storage.ErrorEvent
}

// usageTick is the recorder's timer: flush the batch if it is old enough.
type usageTick struct{}

// usageFlush flushes now; done is closed once everything accepted so far is written.
type usageFlush struct{ done chan struct{} }

// usageWritten is the writer's report for one batch. spare is the batch's
// record slice, cleared and of length 0, for the recorder's next batch (nil
// when the batch had no records).
type usageWritten struct {
	n      int // records
	events int
	err    error
	at     time.Time
	spare  []storage.UsageRecord
}
