package actors

import "sync/atomic"

// snapshot is what readers outside an account's actor (System.View, the
// admin API, metrics) see of the account: its last published View, and its
// lease counters, which every grant changes without a publish (a grant is
// the hot path; it tells the scheduler nothing it did not assume already).
// Only the account's actor writes it.
type snapshot struct {
	view     atomic.Pointer[View]
	inFlight atomic.Int64
	requests atomic.Uint64
}

// publish makes v the published view, counters included. v must not be
// modified afterwards.
func (s *snapshot) publish(v *View) {
	s.counters(v.InFlight, v.Requests)
	s.view.Store(v)
}

// counters makes the lease counters current without a publish: inFlight
// leases held, requests granted since start.
func (s *snapshot) counters(inFlight int, requests uint64) {
	s.inFlight.Store(int64(inFlight))
	s.requests.Store(requests)
}

// load returns a copy of the published view with the current counters.
func (s *snapshot) load() (View, bool) {
	p := s.view.Load()
	if p == nil {
		return View{}, false
	}
	v := *p
	v.InFlight, v.Requests = int(s.inFlight.Load()), s.requests.Load()
	return v, true
}

// peek returns the published view itself when its counters are current,
// else a copy with the current counters: no copy for an account whose
// leases have not moved since its last publish.
func (s *snapshot) peek() *View {
	p := s.view.Load()
	if p == nil {
		return nil
	}
	inFlight, requests := int(s.inFlight.Load()), s.requests.Load()
	if p.InFlight == inFlight && p.Requests == requests {
		return p
	}
	v := *p
	v.InFlight, v.Requests = inFlight, requests
	return &v
}
