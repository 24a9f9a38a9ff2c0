package actors

import (
	"time"

	"github.com/troupe-gw/troupe/upstream"
)

// Waiters for one account (AcquireRequest.Only): requests whose state lives
// on that account wait for it alone, in their own per-account FIFO, so they
// never hold up the shared queues when another account frees first.

// maxOwnedWaiters bounds the requests waiting for any one account.
const maxOwnedWaiters = 1024

// parkOwned queues req for its account, or fails it when it cannot wait.
func (s *scheduler) parkOwned(req *acquireState) {
	e := s.byID[req.Only]
	switch {
	case e == nil || !s.inSet(e, req) || (!e.v[req.slot].scored.OK && !refreshing(e.view)) || e.terminal:
		s.reject(req, &AcquireError{Err: ErrUnavailable, RetryAfter: time.Minute})
	case req.excluded(req.Only):
		s.reject(req, &AcquireError{Err: ErrUnavailable, RetryAfter: time.Second})
	case req.deadline.IsZero() || !s.cfg.now().Before(req.deadline):
		s.reject(req, &AcquireError{Err: ErrBusy, RetryAfter: time.Second})
	case len(s.owned[req.Only]) >= maxOwnedWaiters:
		s.reject(req, &AcquireError{Err: ErrBusy, RetryAfter: time.Second})
	default:
		if s.owned == nil {
			s.owned = make(map[string][]*acquireState)
		}
		req.enqueued = s.cfg.now()
		s.owned[req.Only] = append(s.owned[req.Only], req)
		s.stats.Parked++
		s.notifyParked(req)
	}
}

// wakeOwned grants e to the requests waiting for it, oldest first, while it
// has capacity.
func (s *scheduler) wakeOwned(c *mailCtx, e *entry) {
	q := s.owned[e.view.ID]
	for len(q) > 0 {
		req := q[0]
		if req.state.Load() != acqPending {
			q = q[1:]
			continue
		}
		if s.pick(req) != e {
			break
		}
		q = q[1:]
		s.grant(c, e, req)
	}
	if len(q) == 0 {
		delete(s.owned, e.view.ID)
	} else {
		s.owned[e.view.ID] = q
	}
}

// sweepOwned fails waiters past their deadline and drops abandoned ones.
func (s *scheduler) sweepOwned(now time.Time) {
	for id, q := range s.owned {
		kept := q[:0]
		for _, r := range q {
			if r.state.Load() != acqPending {
				continue
			}
			if !r.deadline.IsZero() && now.After(r.deadline) {
				s.reject(r, &AcquireError{Err: ErrBusy, RetryAfter: time.Second})
				continue
			}
			kept = append(kept, r)
		}
		if len(kept) == 0 {
			delete(s.owned, id)
		} else {
			s.owned[id] = kept
		}
	}
}

// refreshing reports whether v's account rests for a token refresh after
// a 401 (cooldown reason auth): it is back within moments, so a request
// bound to it (Only) waits for it, up to its MaxWait, though the policy
// excludes it while it rests.
func refreshing(v *View) bool {
	return v.Status == StatusCooling && v.CooldownReason == upstream.ClassAuth.String()
}
