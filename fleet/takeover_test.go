package fleet

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/internal/poll"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
)

// ownedNode is a peerNode whose accounts are owned through Owners (not
// a fixed fence), on membership and ownership stores it can be cut from:
// cutting both and closing its server is a kill -9 as the others see it.
type ownedNode struct {
	peerNode
	owners *Owners
	cut    *cut
}

func startOwnedNode(t *testing.T, ctx context.Context, mc *memcache.Cache, master []byte, id string, accs []storage.Account) *ownedNode {
	return startOwnedNodeWithhold(t, ctx, mc, master, id, accs, 0)
}

// startOwnedNodeWithhold is startOwnedNode with the peer's
// PeerConfig.WithholdFor (0: the default).
func startOwnedNodeWithhold(t *testing.T, ctx context.Context, mc *memcache.Cache, master []byte, id string, accs []storage.Account, withhold time.Duration) *ownedNode {
	t.Helper()
	n := &ownedNode{peerNode: peerNode{id: id, logs: &lockedWriter{w: &bytes.Buffer{}}, withholdFor: withhold}, cut: &cut{Membership: mc}}
	f, log := n.start(t, ctx, n.cut, mc, master, accs)
	var err error
	if n.owners, err = StartOwners(ctx, OwnerConfig{Fleet: f, Store: cutOwnership{Ownership: mc, c: n.cut}, Pool: n.sys, Logger: log, Adopt: n.peer.Adopt}); err != nil {
		t.Fatal(err)
	}
	return n
}

// runs reports whether n runs account id as a take later than the one
// fenced by token after (0: any take): it holds the ownership lease with
// a greater token, and its own actor (not the view of another owner it
// indexes) grants, its adoption done. The token matters: an instance
// that drained the account keeps answering Holder until its renewal has
// applied the release, and under load that lags the next owner's take.
func (n *ownedNode) runs(id string, after uint64) bool {
	if tok, held := n.owners.Holder(id); !held || tok <= after {
		return false
	}
	for _, v := range n.sys.Views() {
		if v.ID == id {
			return !v.Moving
		}
	}
	return false
}

// ownedByC is the takeover tests' account, at max_concurrency 2, which
// rendezvous hashing over gw-a, gw-b and gw-c gives to gw-c.
func ownedByC() storage.Account {
	members := []Member{{ID: "gw-a"}, {ID: "gw-b"}, {ID: "gw-c"}}
	for i := 0; ; i++ {
		if id := fmt.Sprintf("acc-%d", i); Owner(id, members) == "gw-c" {
			return storage.Account{ID: id, Name: "x", Provider: storage.ProviderOpenAI, BaseURL: "http://127.0.0.1:1/v1",
				Credentials: storage.Credentials{APIKey: "sk-x-secret"}, Models: []string{"m"}, MaxConcurrency: 2}
		}
	}
}

// takeover is the scene of the takeover tests: three instances, the
// account at max_concurrency 2 owned by c (its lease's token), and the
// two leases c granted, la held by a and lb by b.
type takeover struct {
	a, b, c *ownedNode
	acc     storage.Account
	token   uint64
	la, lb  *actors.Lease
}

func startTakeover(t *testing.T, ctx context.Context) *takeover {
	t.Helper()
	return startTakeoverWithhold(t, ctx, 0)
}

// startTakeoverWithhold is startTakeover with every peer's
// PeerConfig.WithholdFor (0: the default).
func startTakeoverWithhold(t *testing.T, ctx context.Context, withhold time.Duration) *takeover {
	t.Helper()
	mc := memcache.New(memcache.Options{})
	t.Cleanup(func() { mc.Close() })
	master := testKey(7)
	acc := ownedByC()
	accs := []storage.Account{acc}
	a := startOwnedNodeWithhold(t, ctx, mc, master, "gw-a", accs, withhold)
	b := startOwnedNodeWithhold(t, ctx, mc, master, "gw-b", accs, withhold)
	c := startOwnedNodeWithhold(t, ctx, mc, master, "gw-c", accs, withhold)
	poll.Until(t, 10*time.Second, "c owns the account, a and b index it", func() bool {
		return c.runs(acc.ID, 0) && a.sys.RemoteAccounts() == 1 && b.sys.RemoteAccounts() == 1
	})
	token, _ := c.owners.Holder(acc.ID)
	var la, lb *actors.Lease
	poll.Until(t, 5*time.Second, "a and b each hold a lease c granted", func() bool {
		if la == nil {
			la, _ = a.sys.Acquire(ctx, actors.AcquireRequest{Model: "m"})
		}
		if lb == nil {
			lb, _ = b.sys.Acquire(ctx, actors.AcquireRequest{Model: "m"})
		}
		return la != nil && lb != nil
	})
	if v, _ := c.sys.View(acc.ID); v.InFlight != 2 {
		t.Fatalf("c sees %d in flight, want 2", v.InFlight)
	}
	return &takeover{a: a, b: b, c: c, acc: acc, token: token, la: la, lb: lb}
}

// kill is a kill -9 of c: no heartbeat, no renewal, no endpoint.
func (s *takeover) kill() {
	s.c.cut.down.Store(true)
	s.c.srv.CloseClientConnections()
	s.c.srv.Close()
}

// newOwner waits until a survivor has taken the account over from c and
// runs it (its adoption done), and returns it and the other survivor.
func (s *takeover) newOwner(t *testing.T) (owner, other *ownedNode) {
	t.Helper()
	poll.Until(t, 15*time.Second, "a survivor took the account over and runs it", func() bool {
		for _, n := range []*ownedNode{s.a, s.b} {
			if n.runs(s.acc.ID, s.token) {
				owner = n
			}
		}
		return owner != nil
	})
	return owner, map[bool]*ownedNode{true: s.b, false: s.a}[owner == s.a]
}

// waitWithheld waits until owner, the new owner, has withheld a share of
// the account for the silent other survivor and other has owner's view of
// it, and returns owner's count of leases in flight on it.
func (s *takeover) waitWithheld(t *testing.T, owner, other *ownedNode) (inFlight func() int) {
	t.Helper()
	inFlight = func() int { v, _ := owner.sys.View(s.acc.ID); return v.InFlight }
	// The share withheld for the silent member appears once the adoption
	// has heard from every member (or given up on it).
	poll.Until(t, 10*time.Second, "the new owner's adoption done (a share withheld)", func() bool {
		return owner.peer.Stats().Withheld > 0
	})
	poll.Until(t, 5*time.Second, "the other survivor has the new owner's view", func() bool {
		v, ok := other.sys.View(s.acc.ID)
		return ok && !v.Moving && v.InFlight == inFlight()
	})
	return inFlight
}

// granted tries one lease on each of nodes and returns how many were
// granted (released at the test's end).
func (s *takeover) granted(t *testing.T, ctx context.Context, nodes ...*ownedNode) int {
	n := 0
	for _, node := range nodes {
		if l, err := node.sys.Acquire(ctx, actors.AcquireRequest{Model: "m"}); err == nil {
			n++
			t.Cleanup(func() { node.sys.Release(l, actors.Outcome{Status: 200}) })
		}
	}
	return n
}

// TestTakeoverCountsHeldLeases: the owner of an account at max_concurrency
// 2 grants both leases to the two other instances, then dies (cut from
// Redis, its endpoint gone). The survivor that takes the account over
// counts the leases the dead owner granted before it grants: no third or
// fourth lease while both run; each holder's release, sent to the new
// owner, frees one.
func TestTakeoverCountsHeldLeases(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startTakeover(t, ctx)
	a, b, acc, la, lb := s.a, s.b, s.acc, s.la, s.lb
	s.kill()
	owner, other := s.newOwner(t)
	inFlight := func() int { v, _ := owner.sys.View(acc.ID); return v.InFlight }
	if got := inFlight(); got != 2 {
		t.Errorf("the new owner counts %d in flight on the account, want the 2 the dead owner granted", got)
	}
	// Neither survivor gets a lease while both holders' leases run: the
	// upstream would see more than max_concurrency.
	poll.Until(t, 5*time.Second, "the other survivor has the new owner's view", func() bool {
		v, ok := other.sys.View(acc.ID)
		return ok && !v.Moving && v.InFlight == 2
	})
	if g := s.granted(t, ctx, owner, other); g != 0 {
		t.Fatalf("%d leases granted past max_concurrency 2 while the dead owner's 2 run (new owner counts %d)\n%s", g, inFlight(), owner.logs.String())
	}

	// a's release goes to the new owner and frees one.
	a.sys.Release(la, actors.Outcome{Status: 200})
	poll.Until(t, 5*time.Second, "a's release reaches the new owner", func() bool { return inFlight() == 1 })
	var l3 *actors.Lease
	poll.Until(t, 5*time.Second, "one lease granted again", func() bool {
		var err error
		l3, err = owner.sys.Acquire(ctx, actors.AcquireRequest{Model: "m"})
		return err == nil
	})
	if l, err := owner.sys.Acquire(ctx, actors.AcquireRequest{Model: "m"}); err == nil {
		owner.sys.Release(l, actors.Outcome{Status: 200})
		t.Fatalf("a second lease granted with b's adopted lease running (in flight %d)", inFlight())
	}
	b.sys.Release(lb, actors.Outcome{Status: 200})
	owner.sys.Release(l3, actors.Outcome{Status: 200})
	poll.Until(t, 5*time.Second, "every lease ended on the new owner", func() bool { return inFlight() == 0 })
	if st := owner.peer.Stats(); st.Held != 0 {
		t.Errorf("new owner's stats %+v, want 0 held", st)
	}
	for _, n := range []*ownedNode{a, b} {
		if s := n.logs.String(); strings.Contains(s, "sk-x-secret") {
			t.Errorf("%s's log holds a credential", n.id)
		}
	}
}

// TestTakeoverWithholdsUnanswered: as above, but the other survivor's
// answer to the new owner's ask is lost (its endpoint answers 503 to
// PathHeld). The new owner knows only its own held lease; it must not
// grant the share the silent member may hold: nothing is granted while
// both leases run, although only one was counted. Once the member
// answers again its lease is adopted in place of the share withheld, and
// both releases free the account.
func TestTakeoverWithholdsUnanswered(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := startTakeover(t, ctx)
	s.a.heldLost.Store(true)
	s.b.heldLost.Store(true)
	s.kill()
	owner, other := s.newOwner(t)
	owner.heldLost.Store(false)
	mine, theirs := s.la, s.lb
	if owner == s.b {
		mine, theirs = s.lb, s.la
	}
	inFlight := s.waitWithheld(t, owner, other)
	if g := s.granted(t, ctx, owner, other); g != 0 {
		t.Fatalf("%d leases granted past max_concurrency 2 while the dead owner's 2 run, one of them held by a member that did not answer (new owner counts %d)\n%s",
			g, inFlight(), owner.logs.String())
	}
	if st := owner.peer.Stats(); st.Adopted != 1 {
		t.Fatalf("new owner adopted %d leases, want its own 1 (the other's answer is lost)\n%s", st.Adopted, owner.logs.String())
	}

	// The member answers again: its lease is adopted, the share withheld
	// let go; the account is still full.
	other.heldLost.Store(false)
	poll.Until(t, 10*time.Second, "the silent member's lease adopted", func() bool { return owner.peer.Stats().Adopted == 2 })
	poll.Until(t, 5*time.Second, "the share withheld let go", func() bool { return owner.peer.Stats().Withheld == 0 && inFlight() == 2 })
	if g := s.granted(t, ctx, owner, other); g != 0 {
		t.Fatalf("%d leases granted while both adopted leases run", g)
	}
	owner.sys.Release(mine, actors.Outcome{Status: 200})
	other.sys.Release(theirs, actors.Outcome{Status: 200})
	poll.Until(t, 5*time.Second, "both releases reach the new owner", func() bool { return inFlight() == 0 })
	if st := owner.peer.Stats(); st.Held != 0 {
		t.Errorf("new owner's stats %+v, want 0 held", st)
	}
}

// TestTakeoverWithholdLimit: a member that stays silent has its share
// withheld no longer than PeerConfig.WithholdFor (troupe serve: the
// request timeout, past which no call it could hold a lease for runs):
// then the share is let go and the account grants what its own count
// leaves, so a member unreachable for good does not block the account.
func TestTakeoverWithholdLimit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const withhold = 1500 * time.Millisecond
	s := startTakeoverWithhold(t, ctx, withhold)
	s.a.heldLost.Store(true)
	s.b.heldLost.Store(true)
	s.kill()
	owner, other := s.newOwner(t)
	owner.heldLost.Store(false)
	inFlight := s.waitWithheld(t, owner, other)
	if st := owner.peer.Stats(); st.Withheld != 1 || st.Adopted != 1 {
		t.Fatalf("new owner's stats %+v, want its own lease adopted and the silent member's share (1) withheld\n%s", st, owner.logs.String())
	}
	if g := s.granted(t, ctx, owner); g != 0 {
		t.Fatalf("%d leases granted while the silent member's share is withheld", g)
	}
	poll.Until(t, withhold+5*time.Second, "the share withheld let go after WithholdFor", func() bool {
		return owner.peer.Stats().Withheld == 0 && inFlight() == 1
	})
	if !strings.Contains(owner.logs.String(), "still silent after the longest a call runs") {
		t.Errorf("no WARN for the share let go:\n%s", owner.logs.String())
	}
	if g := s.granted(t, ctx, owner); g != 1 {
		t.Fatalf("%d leases granted once the share is let go, want 1 (max_concurrency 2, 1 adopted)", g)
	}
}

// TestTakeoverAfterDrainAsksNobody: an account that moves because an
// instance joins is drained by its old owner, which says so as it
// releases the lease: the joiner takes it Clean and asks no member for
// leases. When the joiner is then killed, the survivor's take is not
// clean and asks.
func TestTakeoverAfterDrainAsksNobody(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mc := memcache.New(memcache.Options{})
	defer mc.Close()
	master := testKey(7)
	acc := ownedByC()
	accs := []storage.Account{acc}
	a := startOwnedNode(t, ctx, mc, master, "gw-a", accs)
	b := startOwnedNode(t, ctx, mc, master, "gw-b", accs)
	poll.Until(t, 10*time.Second, "a or b runs the account", func() bool { return a.runs(acc.ID, 0) || b.runs(acc.ID, 0) })
	asked := func() int64 { return a.heldAsks.Load() + b.heldAsks.Load() }
	before := asked()
	c := startOwnedNode(t, ctx, mc, master, "gw-c", accs)
	poll.Until(t, 10*time.Second, "c, joining, runs the account", func() bool { return c.runs(acc.ID, 0) })
	if n := asked() - before; n != 0 {
		t.Fatalf("c took the account after a drain and asked members %d times for leases, want 0", n)
	}
	token, _ := c.owners.Holder(acc.ID)
	c.cut.down.Store(true)
	c.srv.CloseClientConnections()
	c.srv.Close()
	poll.Until(t, 15*time.Second, "a survivor took the account over from c and runs it", func() bool {
		return a.runs(acc.ID, token) || b.runs(acc.ID, token)
	})
	if asked() == before {
		t.Fatal("the survivor took a dead owner's account without asking the other survivor for leases")
	}
}
