package actors

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
)

// Acquire errors. The gateway maps them to client-protocol errors.
var (
	// ErrNoAccount means no account in the pool serves the request at all
	// (unknown model, or no provider speaking the endpoint).
	ErrNoAccount = errors.New("actors: no account serves this request")
	// ErrUnavailable means accounts exist but none can take the request now
	// (all cooling, disabled or tried); RetryAfter says when one may return.
	ErrUnavailable = errors.New("actors: no account available")
	// ErrBusy means every candidate stayed at its concurrency limit for the
	// whole wait, or the wait queue was full.
	ErrBusy = errors.New("actors: all accounts busy")
)

// AcquireError carries an acquire failure and a Retry-After hint.
type AcquireError struct {
	Err        error         // ErrNoAccount, ErrUnavailable or ErrBusy
	RetryAfter time.Duration // hint for the client; 0 when unknown
}

// Error returns the cause's message.
func (e *AcquireError) Error() string { return e.Err.Error() }

// Unwrap returns the cause (ErrNoAccount, ErrUnavailable or ErrBusy), for errors.Is.
func (e *AcquireError) Unwrap() error { return e.Err }

// AcquireRequest carries the routing attributes of one client request.
type AcquireRequest struct {
	// Endpoint is the protocol the client speaks. Every account serving
	// Model is a candidate whatever its provider speaks (the gateway
	// translates); Native narrows the candidates to the providers that speak
	// Endpoint themselves (upstream.Supports), for requests only they can
	// serve (a previous_response_id, /v1/responses/compact).
	Endpoint translate.Protocol
	Native   bool
	Model    string        // requested model
	Group    string        // routing group of the API key ("" = default group)
	Exclude  []string      // account IDs already tried for this request
	MaxWait  time.Duration // how long to wait for capacity when all candidates are busy (0 = no wait)

	// Route filters from the policy's route(): only accounts of Provider (if
	// set) carrying every tag in Tags are candidates.
	Provider storage.Provider
	Tags     []string
	// StickyKey keeps requests with the same key on the same account while
	// it stays available (for Knobs.StickyTTL after its last use).
	StickyKey string

	// Prefer names the account that owns state this request continues (the
	// account that served its previous_response_id): picked first while it
	// is a candidate and available.
	Prefer string
	// Only, when set, names the one account that may serve the request (the
	// owner of a previous_response_id whose state no other account has).
	// While that account is busy, or rests for a token refresh after a 401
	// (cooldown reason auth), the request waits for it, up to MaxWait, in
	// a queue of its own (owned.go); an account not in the pool, or not
	// serving the request, fails it with ErrUnavailable at once.
	Only string

	// KeyID and Weight place a waiting request in the fair queue: when the
	// pool is saturated, waiters are served round robin across API keys,
	// Weight turns per round for this key (default 1).
	KeyID  string
	Weight int

	// Canary asks for the canary policy's judgement (System.SetCanary); the
	// active policy judges when no canary runs.
	Canary bool

	// Wait, when set, is asked on the caller's goroutine once the
	// scheduler parks the request (no candidate can take it now): an error
	// ends the acquire at once with that error instead of a wait of up to
	// MaxWait. It lets the caller refuse at once what no wait can help
	// (the gateway: a model no account could ever serve), at no cost to a
	// request granted at once.
	Wait WaitCheck
}

// WaitCheck decides whether a parked acquire waits (AcquireRequest.Wait).
// It must be safe for concurrent use.
type WaitCheck interface {
	// MayWait returns nil to let a parked acquire for model wait, or the
	// error Acquire returns at once (a lease granted meanwhile goes back).
	MayWait(model string) error
}

// filtered reports whether the request narrows candidates beyond the index.
func (r *acquireState) filtered() bool {
	return len(r.Exclude) > 0 || r.Provider != "" || len(r.Tags) > 0 || r.Native
}

// acquire states: a request is pending until exactly one party moves it on.
const (
	acqPending int32 = iota
	acqGranted
	acqAbandoned
	acqFailed
)

// acquireState is one in-progress acquire, shared by the caller, the scheduler
// and at most one account actor. The state word decides races: an account
// grants only if it moves pending→granted; the caller gives up only if it moves
// pending→abandoned, so a lease is never granted to nobody.
type acquireState struct {
	AcquireRequest
	key   routeKey
	state atomic.Int32
	// notified: the caller was told the request is parked
	// (scheduler.notifyParked). Beside state, in its padding: a word of
	// its own took acquireState (704 bytes, and 8 of allocation header) to
	// the 768-byte size class, 64 bytes more an acquire (issue 21).
	notified bool
	reply    chan acquireReply // buffered 2: at most one parked notice, then exactly one reply once state leaves pending
	deadline time.Time         // zero: do not wait
	tries    int               // grants attempted by the scheduler (bounded)
	enqueued time.Time
	slot     int // the slot that judged the last pick
	limit    int // the slot's tier cap on the picked account, for its grant
	// lease is the lease a local grant hands over (account.grant), so that
	// an acquire allocates one object for both; its Decision is why the
	// last pick chose its account (scheduler.trace writes it in place, the
	// holder reads it through the lease: one copy, not three).
	lease Lease
}

type acquireReply struct {
	lease  *Lease
	err    *AcquireError
	parked bool // a notice, not the reply: the request waits for capacity
}

func (r *acquireState) excluded(id string) bool {
	for _, x := range r.Exclude {
		if x == id {
			return true
		}
	}
	return false
}

// fail moves a pending request to failed and delivers err; it reports whether it did.
func (r *acquireState) fail(err *AcquireError) bool {
	if !r.state.CompareAndSwap(acqPending, acqFailed) {
		return false
	}
	r.reply <- acquireReply{err: err}
	return true
}
