package actors

import "context"

// schedScores asks for every account's latest policy verdict; the reply goes
// to the channel (buffered, so the scheduler never blocks on it).
type schedScores struct{ reply chan map[string]Scored }

// scores copies the serving policy's verdict of every indexed account (not
// the canary's), by account ID.
func (s *scheduler) scores() map[string]Scored {
	out := make(map[string]Scored, len(s.byID))
	for id, e := range s.byID {
		out[id] = e.v[slotPolicy].scored
	}
	return out
}

// Scores returns the routing policy's latest verdict (score, tier, excluded)
// for every account the scheduler indexes, by account ID, as the scheduler
// last computed it (accounts still being rescored after a policy swap carry
// the previous policy's verdict). It costs one map of the pool's size; it is
// meant for the admin API, not the request path. ctx bounds the wait for the
// scheduler's answer.
func (s *System) Scores(ctx context.Context) (map[string]Scored, error) {
	reply := make(chan map[string]Scored, 1)
	s.engine.Send(s.sched, schedScores{reply: reply})
	select {
	case m := <-reply:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// EachView calls fn with the latest view of every account, in no order,
// without copying where it can: published views are never modified (each
// change publishes a new one), so fn may keep the pointer but must not write
// through it. Only an account whose lease counters (InFlight, Requests) moved
// since its last publish costs a copy. It is Views for readers of large pools.
func (s *System) EachView(fn func(*View)) {
	s.snapshots.each(func(sn *snapshot) bool {
		if p := sn.peek(); p != nil {
			fn(p)
		}
		return true
	})
}

// AnyView reports whether fn holds for the latest view of some account,
// calling it in no order until it does (the rest are not visited). As with
// EachView, fn may keep the pointer but must not write through it.
func (s *System) AnyView(fn func(*View) bool) bool {
	found := false
	s.snapshots.each(func(sn *snapshot) bool {
		if p := sn.peek(); p != nil && fn(p) {
			found = true
		}
		return !found
	})
	return found
}
