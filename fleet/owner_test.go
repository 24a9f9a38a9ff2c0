package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/memcache"
)

// fakePool records what ownership asks of the actors: which accounts run
// under which fence, which drain (done is called when the test says).
type fakePool struct {
	mu       sync.Mutex
	ids      []string
	running  map[string]*actors.Fence
	draining map[string]func()
}

func newFakePool(n int) *fakePool {
	p := &fakePool{running: map[string]*actors.Fence{}, draining: map[string]func(){}}
	for i := range n {
		p.ids = append(p.ids, fmt.Sprintf("acct-%03d", i))
	}
	return p
}

func (p *fakePool) Accounts(context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ids...), nil
}

func (p *fakePool) Own(id string, f *actors.Fence) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running[id] = f
	delete(p.draining, id)
}

func (p *fakePool) Disown(id string, done func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.running[id]; !ok {
		return
	}
	if done == nil {
		delete(p.running, id)
		return
	}
	p.draining[id] = done
}

func (p *fakePool) drainingN() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.draining)
}

// finishDrains ends every drain: the actors stopped.
func (p *fakePool) finishDrains() {
	p.mu.Lock()
	var dones []func()
	for id, done := range p.draining {
		delete(p.running, id)
		delete(p.draining, id)
		dones = append(dones, done)
	}
	p.mu.Unlock()
	for _, d := range dones {
		d()
	}
}

// granting returns the accounts whose actor may grant at now: running,
// not draining, fence holding.
func (p *fakePool) granting(now time.Time) map[string]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]uint64{}
	for id, f := range p.running {
		if _, d := p.draining[id]; !d && f.Holds(now) {
			out[id] = f.Token()
		}
	}
	return out
}

// within advances the fake clock in steps of 50 ms until cond holds,
// checking between steps that no account grants on two instances.
func within(t *testing.T, d time.Duration, what string, pools []*fakePool, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); ; {
		synctest.Wait()
		exclusive(t, pools)
		if cond() {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func exclusive(t *testing.T, pools []*fakePool) {
	t.Helper()
	seen := map[string]int{}
	now := time.Now()
	for i, p := range pools {
		for id := range p.granting(now) {
			if j, ok := seen[id]; ok {
				t.Fatalf("account %s grants on instances %d and %d at once", id, j, i)
			}
			seen[id] = i
		}
	}
}

func startOwners(t *testing.T, f *Fleet, store storage.Ownership, p *fakePool) *Owners {
	t.Helper()
	o, err := StartOwners(t.Context(), OwnerConfig{Fleet: f, Store: store, Pool: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Stop(context.Background()) })
	return o
}

// cutOwnership is an Ownership store an instance can be cut off from.
type cutOwnership struct {
	storage.Ownership
	c *cut
}

func (s cutOwnership) Renew(ctx context.Context, owner string, claims []storage.OwnershipClaim, ttl time.Duration) error {
	if s.c.down.Load() {
		return errCut
	}
	return s.Ownership.Renew(ctx, owner, claims, ttl)
}

// Ownership across three instances: the first owns every account; the
// others take their share once the first has drained it; a cut-off
// instance stops granting before its leases expire and the survivors take
// its accounts within the TTLs; a clean stop hands over at once. No account
// ever grants on two instances.
func TestOwnership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mc := memcache.New(memcache.Options{})
		defer mc.Close()
		const n = 60
		pa, pb, pc := newFakePool(n), newFakePool(n), newFakePool(n)
		pools := []*fakePool{pa, pb, pc}
		all := func() int {
			return len(pa.granting(time.Now())) + len(pb.granting(time.Now())) + len(pc.granting(time.Now()))
		}

		fa := start(t, mc, "a", DefaultTTL, DefaultInterval)
		oa := startOwners(t, fa, mc, pa)
		if got := len(pa.granting(time.Now())); got != n || oa.Owned() != n {
			t.Fatalf("alone, a grants for %d accounts (owned %d), want %d", got, oa.Owned(), n)
		}
		tokens := pa.granting(time.Now())

		cb := &cut{Membership: mc}
		fb := start(t, cb, "b", DefaultTTL, DefaultInterval)
		ob := startOwners(t, fb, cutOwnership{Ownership: mc, c: cb}, pb)
		fc := start(t, mc, "c", DefaultTTL, DefaultInterval)
		oc := startOwners(t, fc, mc, pc)
		within(t, 5*time.Second, "a drains what moved", pools, func() bool { return pa.drainingN() > 0 && len(fa.Members()) == 3 })
		pa.finishDrains()
		within(t, 5*time.Second, "every account granting on its rendezvous owner", pools, func() bool {
			pa.finishDrains()
			return all() == n && len(pb.granting(time.Now())) > 0 && len(pc.granting(time.Now())) > 0
		})
		for id, tok := range pb.granting(time.Now()) {
			if Owner(id, fb.Members()) != "b" {
				t.Fatalf("b grants for %s, which hashes to %s", id, Owner(id, fb.Members()))
			}
			if tok <= tokens[id] {
				t.Fatalf("account %s moved with token %d, not above a's %d", id, tok, tokens[id])
			}
		}
		bOwned := ob.Owned()

		// b cut off from Redis: it stops granting before its leases can
		// expire; a and c take its accounts after the member and lease TTLs.
		cut := time.Now()
		cb.down.Store(true)
		within(t, DefaultTTL, "b stops granting", pools, func() bool { return len(pb.granting(time.Now())) == 0 })
		if stopped := time.Since(cut); stopped >= DefaultTTL {
			t.Fatalf("b granted %v after its last renewal, not less than the lease TTL", stopped)
		}
		within(t, 3*DefaultTTL, "b's accounts served again", pools, func() bool { return all() == n })
		if recovered := time.Since(cut); recovered > 2*DefaultTTL+2*DefaultInterval {
			t.Errorf("b's %d accounts served again %v after the cut, want within two TTLs", bOwned, recovered)
		}

		// c stops cleanly (front first, then its leases, then the set): its
		// accounts move to a within a heartbeat, not a TTL.
		stop := time.Now()
		if err := oc.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := fc.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		within(t, 3*DefaultInterval, "c's accounts on a", pools, func() bool { return len(pa.granting(time.Now())) == n })
		if d := time.Since(stop); d > 2*DefaultInterval+100*time.Millisecond {
			t.Errorf("c's accounts moved %v after its stop, want within two heartbeats", d)
		}
	})
}

// The lease store: a free lease is taken with a new token, renewed by its
// holder only, refused to others with the holder named, released by its
// holder only, and retaken with a higher token.
func TestRenewStores(t *testing.T) {
	leases := func(t *testing.T, s storage.Ownership) {
		ctx := t.Context()
		claim := func(owner string, want bool) storage.OwnershipClaim {
			cl := []storage.OwnershipClaim{{Account: "acct", Want: want}}
			if err := s.Renew(ctx, owner, cl, time.Minute); err != nil {
				t.Fatal(err)
			}
			return cl[0]
		}
		first := claim("a", true)
		if first.Holder != "a" || first.Token == 0 {
			t.Fatalf("free lease taken: %+v", first)
		}
		if c := claim("a", true); c.Holder != "a" || c.Token != first.Token {
			t.Fatalf("renewed by its holder: %+v, want the same token %d", c, first.Token)
		}
		if c := claim("b", true); c.Holder != "a" || c.Token != first.Token {
			t.Fatalf("asked by another: %+v, want a's lease untouched", c)
		}
		if c := claim("b", false); c.Holder != "a" {
			t.Fatalf("released by another: %+v, want a's lease untouched", c)
		}
		if c := claim("a", false); c.Holder != "" || c.Token != 0 {
			t.Fatalf("released by its holder: %+v", c)
		}
		if c := claim("b", true); c.Holder != "b" || c.Token <= first.Token {
			t.Fatalf("retaken: %+v, want b with a token above %d", c, first.Token)
		}
		if err := s.Renew(ctx, "a", []storage.OwnershipClaim{{Account: "x", Want: true}}, 0); !errors.Is(err, storage.ErrInvalid) {
			t.Fatalf("ttl 0: %v", err)
		}
		// Many at once (Redis runs them in chunks of its scripts): every
		// claim answered in place, the one held by b left to b.
		many := make([]storage.OwnershipClaim, 1000)
		for i := range many {
			many[i] = storage.OwnershipClaim{Account: fmt.Sprintf("m%04d", i), Want: true}
		}
		many[700].Account = "acct"
		if err := s.Renew(ctx, "c", many, time.Minute); err != nil {
			t.Fatal(err)
		}
		for i, c := range many {
			want := "c"
			if i == 700 {
				want = "b"
			}
			if c.Holder != want || c.Token == 0 {
				t.Fatalf("claim %d of 1000: %+v, want held by %s with a token", i, c, want)
			}
		}
		again := append([]storage.OwnershipClaim(nil), many...)
		if err := s.Renew(ctx, "c", again, time.Minute); err != nil {
			t.Fatal(err)
		}
		for i := range again {
			want := many[i]
			want.Clean = false // a renewal is not a take
			if again[i] != want {
				t.Fatalf("renewal %d: %+v, want %+v (the same token)", i, again[i], want)
			}
		}
	}
	t.Run("memory", func(t *testing.T) {
		mc := memcache.New(memcache.Options{})
		defer mc.Close()
		leases(t, mc)
	})
	t.Run("redis", func(t *testing.T) { leases(t, testRedis(t)) })
}
