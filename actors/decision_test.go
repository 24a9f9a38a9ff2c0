package actors

import (
	"context"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/troupe-gw/troupe/scripts"
)

// byIDPolicy scores accounts by the last digit of their ID: ascending, or
// descending when reverse is set, so two instances disagree on every pick.
type byIDPolicy struct {
	name    string
	reverse bool
}

func (p byIDPolicy) Name() string          { return p.name }
func (p byIDPolicy) Version() uint64       { return 7 }
func (p byIDPolicy) Knobs() *scripts.Knobs { return leastInFlightKnobs }
func (p byIDPolicy) Reads() scripts.Fields { return scripts.FieldsAll }
func (p byIDPolicy) Score(v *View, _ time.Time) Scored {
	d := float64(v.ID[len(v.ID)-1] - '0')
	if p.reverse {
		d = -d
	}
	return Scored{Score: d, OK: true}
}

// Every lease carries why it was chosen: the policy and its version, the
// candidates, the best scores, the chosen one and how.
func TestDecisionTrace(t *testing.T) {
	s, _ := startSystem(t, 5, 100)
	setPolicyAndWait(t, s, byIDPolicy{name: "by_id"})
	l, err := s.Acquire(context.Background(), chatM)
	if err != nil {
		t.Fatal(err)
	}
	d := l.Decision
	s.Release(l, Outcome{Status: 200})
	if d.Policy != "by_id" || d.PolicyVersion != 7 || d.Canary || d.Via != ViaScore || d.Candidates != 5 {
		t.Errorf("decision %+v: want policy by_id@7, via score, 5 candidates", d)
	}
	if d.NTop != 1 || d.ChosenAccount().ID != l.AccountID || l.AccountID != "id-0004" || d.ChosenAccount().Score != 4 {
		t.Errorf("decision %+v: want the one best, id-0004 with score 4 (lease %s)", d, l.AccountID)
	}
	// Excluded accounts are skipped while walking the heap, and counted.
	req := chatM
	req.Exclude = []string{"id-0004", "id-0003"}
	l, err = s.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	s.Release(l, Outcome{Status: 200})
	if d := l.Decision; l.AccountID != "id-0002" || d.Skipped != 2 || d.ChosenAccount().ID != "id-0002" {
		t.Errorf("with two exclusions: lease %s, decision %+v; want id-0002 after 2 skipped", l.AccountID, d)
	}
	// A preferred account is chosen as such.
	req = chatM
	req.Prefer = "id-0001"
	l, err = s.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	s.Release(l, Outcome{Status: 200})
	if l.AccountID != "id-0001" || l.Decision.Via != ViaPrefer || l.Decision.Via.String() != "prefer" {
		t.Errorf("preferred: lease %s, via %v", l.AccountID, l.Decision.Via)
	}
}

// A canary judges only the requests that ask for it, with the active
// policy's choices unchanged for the others; removing it sends its requests
// back to the active policy.
func TestCanarySideBySide(t *testing.T) {
	s, _ := startSystem(t, 5, 100)
	setPolicyAndWait(t, s, byIDPolicy{name: "up"})
	s.SetCanary(byIDPolicy{name: "down", reverse: true})
	waitFor(t, func() bool {
		st, err := s.SchedulerStats(context.Background())
		return err == nil && st.Canary == "down" && st.Rescoring == 0
	})
	canary := chatM
	canary.Canary = true
	for range 3 {
		if id := acquireRelease(t, s, chatM, Outcome{Status: 200}); id != "id-0004" {
			t.Fatalf("active policy picked %s, want id-0004", id)
		}
		l, err := s.Acquire(context.Background(), canary)
		if err != nil {
			t.Fatal(err)
		}
		s.Release(l, Outcome{Status: 200})
		if l.AccountID != "id-0000" || !l.Decision.Canary || l.Decision.Policy != "down" {
			t.Fatalf("canary picked %s (decision %+v), want id-0000 by canary down", l.AccountID, l.Decision)
		}
	}
	st, _ := s.SchedulerStats(context.Background())
	if st.CanaryTiers[scripts.TierHealthy] != 5 || st.CanaryVersion != 7 {
		t.Errorf("stats %+v: want 5 healthy canary accounts, version 7", st)
	}
	s.SetCanary(nil)
	l, err := s.Acquire(context.Background(), canary)
	if err != nil {
		t.Fatal(err)
	}
	s.Release(l, Outcome{Status: 200})
	if l.AccountID != "id-0004" || l.Decision.Canary || !strings.HasPrefix(l.Decision.Policy, "up") {
		t.Errorf("after abort: canary request picked %s by %+v, want id-0004 by up", l.AccountID, l.Decision)
	}
}

// Filling the trace allocates nothing beyond what an acquire already does.
func TestDecisionTraceAllocs(t *testing.T) {
	var req acquireState
	e := &entry{view: &View{ID: "id-1", Name: "a"}}
	s := &scheduler{cfg: schedulerConfig{now: time.Now}}
	top := []*entry{e, {view: &View{ID: "id-2"}}, {view: &View{ID: "id-3"}}, {view: &View{ID: "id-4"}}}
	var p Policy = byIDPolicy{name: "x"}
	if n := testing.AllocsPerRun(1000, func() { s.trace(&req, ViaScore, top[3], top, 4, 0, p, false) }); n != 0 {
		t.Errorf("trace: %v allocs, want 0", n)
	}
	if req.lease.Decision.ChosenAccount().ID != "id-4" || req.lease.Decision.NTop != TraceTop {
		t.Errorf("chosen beyond the kept ranks: %+v", req.lease.Decision)
	}
}

// TestAcquireStateSizeClass: an acquire's state (one a request, its lease
// inside) fits the runtime's 704-byte size class with its 8-byte
// allocation header; past 696 bytes it takes the 768-byte class, 64 bytes
// more every request (issue 21: the bytes a request allocates set how
// often the collector runs).
func TestAcquireStateSizeClass(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the size classes counted here are a 64-bit platform's")
	}
	if n := unsafe.Sizeof(acquireState{}); n > 704-8 {
		t.Errorf("acquireState is %d bytes: with its allocation header past the 704-byte size class", n)
	}
}
