package actors

import (
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// park queues req to wait for capacity, or fails it when waiting cannot
// help (no account, none live, no wait allowed, queues full).
//
//go:noinline
func (s *scheduler) park(c *mailCtx, req *acquireState) {
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

// wake serves parked requests that e's capacity can now take, oldest first.
func (s *scheduler) wake(c *mailCtx, e *entry) {
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
func (s *scheduler) drain(c *mailCtx, k routeKey) {
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
	if s.remote != nil {
		s.sweepRemote(now)
	}
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
