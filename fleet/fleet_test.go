package fleet

import (
	"context"
	"errors"
	"fmt"
	"github.com/troupe-gw/troupe/internal/poll"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/storage/rediscache"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// cut is a Membership that can be cut off from its store, as an instance
// partitioned from Redis is.
type cut struct {
	storage.Membership
	down atomic.Bool
}

var errCut = errors.New("cut off: " + storage.ErrCacheUnavailable.Error())

func (c *cut) Heartbeat(ctx context.Context, m Member, ttl time.Duration) ([]Member, error) {
	if c.down.Load() {
		return nil, errCut
	}
	return c.Membership.Heartbeat(ctx, m, ttl)
}

// waitMembers waits, on the fleet's change signal, until its live set is
// exactly want (by ID).
func waitMembers(t *testing.T, f *Fleet, want ...string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		ch := f.Changed()
		if got := memberIDs(f.Members()); slices.Equal(got, want) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s sees %v, want %v", f.Self().ID, memberIDs(f.Members()), want)
		}
	}
}

func memberIDs(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func start(t *testing.T, store storage.Membership, id string, ttl, every time.Duration) *Fleet {
	t.Helper()
	f, err := Start(t.Context(), Config{Store: store, Self: Member{ID: id, Addr: id + ":9000"}, TTL: ttl, Interval: every, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Stop(context.Background()) })
	return f
}

// membership runs the life of a three-instance set on store: joins are
// seen within a heartbeat, a clean stop at the next one, a cut-off
// instance after the TTL, and it comes back when its heartbeats do.
func membership(t *testing.T, store storage.Membership, ttl, every time.Duration) {
	a := start(t, store, "a", ttl, every)
	if got := memberIDs(a.Members()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("a alone sees %v", got)
	}
	cb := &cut{Membership: store}
	b := start(t, cb, "b", ttl, every)
	if got := memberIDs(b.Members()); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("b sees %v at Start, want a and b (its first heartbeat reads the set)", got)
	}
	c := start(t, store, "c", ttl, every)
	waitMembers(t, a, "a", "b", "c")
	waitMembers(t, b, "a", "b", "c")
	for _, m := range a.Members() {
		if m.Addr != m.ID+":9000" || m.Started.IsZero() {
			t.Fatalf("announcement %+v lost its address or start time", m)
		}
	}

	// A clean stop leaves at once.
	if err := c.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, a, "a", "b")
	waitMembers(t, b, "a", "b")

	// b cut off: the others drop it after the TTL; b keeps its last set and says why.
	v := a.State().Version
	cb.down.Store(true)
	waitMembers(t, a, "a")
	if a.State().Version <= v {
		t.Fatal("the set changed without a new version")
	}
	for b.State().Err == "" {
		ch := b.Changed()
		select {
		case <-ch:
		case <-time.After(every):
		}
	}
	if got := memberIDs(b.Members()); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("cut-off b sees %v, want its last set", got)
	}
	// b back.
	cb.down.Store(false)
	waitMembers(t, a, "a", "b")
	waitMembers(t, b, "a", "b")
	// b kept its last set while cut off, and a may read b's heartbeat from
	// the store before b has recorded its success: wait for b's own word.
	poll.UntilState(t, 10*ttl, "b's state clear after recovery", func() (bool, string) {
		st := b.State()
		return st.Err == "" && !st.Heartbeat.IsZero(), fmt.Sprintf("%+v", st)
	})
}

func TestMembershipMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mc := memcache.New(memcache.Options{})
		defer mc.Close()
		membership(t, mc, DefaultTTL, DefaultInterval)
	})
}

// testRedis opens the shared test Redis under a prefix of the test's own,
// with cachetest.SlackTimeout: these tests check what the stores do, and
// a loaded machine's Redis sometimes answers slower than the default
// 200 ms (TestRenewStores' 1,000 claims: "i/o timeout" in 2 of 30 loaded
// runs of the package). Closed at the test's end; skipped without Redis.
func testRedis(t *testing.T) *rediscache.Cache {
	t.Helper()
	url := cachetest.RedisURL(t)
	rc, err := rediscache.New(t.Context(), url, rediscache.Options{Prefix: cachetest.RedisPrefix(t, url),
		DialTimeout: cachetest.SlackTimeout, ReadTimeout: cachetest.SlackTimeout, WriteTimeout: cachetest.SlackTimeout, PoolTimeout: cachetest.SlackTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc
}

func TestMembershipRedis(t *testing.T) {
	rc := testRedis(t)
	// Real time: a short TTL keeps the cut-off case quick.
	membership(t, rc, 1500*time.Millisecond, 100*time.Millisecond)
}

// memberAges checks Heartbeat's ages on store: the caller's is 0, another
// member's is the time since its own last announcement, on the backend's
// clock, which wait advances by d. (storage/rediscache tests its own, on
// the Redis server's clock.)
func memberAges(t *testing.T, store storage.Membership, wait func(), d, slack time.Duration) {
	ctx := t.Context()
	if _, err := store.Heartbeat(ctx, Member{ID: "x", Age: time.Hour}, time.Minute); err != nil {
		t.Fatal(err)
	}
	wait()
	ms, err := store.Heartbeat(ctx, Member{ID: "y"}, time.Minute)
	if err != nil || len(ms) != 2 {
		t.Fatalf("%v %+v", err, ms)
	}
	if x, y := ms[0], ms[1]; x.Age < d || x.Age > d+slack || y.Age != 0 {
		t.Fatalf("ages x %v (want %v to %v), y %v (want 0)", x.Age, d, d+slack, y.Age)
	}
	// x announces again: its age starts over.
	if _, err := store.Heartbeat(ctx, Member{ID: "x"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	ms, err = store.Heartbeat(ctx, Member{ID: "y"}, time.Minute)
	if err != nil || len(ms) != 2 || ms[0].Age > slack {
		t.Fatalf("%v %+v: x's age did not start over", err, ms)
	}
}

func TestMemberAgesMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mc := memcache.New(memcache.Options{})
		defer mc.Close()
		memberAges(t, mc, func() { time.Sleep(7 * time.Second) }, 7*time.Second, 0)
	})
}

// Without a store the set is this instance alone, and nothing runs.
func TestSingle(t *testing.T) {
	f, err := Start(t.Context(), Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if f.Shared() || len(f.Members()) != 1 || f.Members()[0].ID != f.Self().ID || f.Self().ID == "" {
		t.Fatalf("single fleet: shared %v, members %+v, self %+v", f.Shared(), f.Members(), f.Self())
	}
	if err := f.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestConfigRefused(t *testing.T) {
	_, err := Start(t.Context(), Config{Store: memcache.New(memcache.Options{}), TTL: time.Second, Interval: time.Second})
	if !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("interval not below ttl: err %v, want ErrInvalid", err)
	}
}

// A store that is down at Start does not stop the instance: it starts
// alone, says why, and joins once the store answers.
func TestStartDuringOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mc := memcache.New(memcache.Options{})
		defer mc.Close()
		other := start(t, mc, "a", DefaultTTL, DefaultInterval)
		cb := &cut{Membership: mc}
		cb.down.Store(true)
		b := start(t, cb, "b", DefaultTTL, DefaultInterval)
		if st := b.State(); st.Err == "" || len(st.Members) != 1 {
			t.Fatalf("b started during an outage: %+v", st)
		}
		cb.down.Store(false)
		waitMembers(t, b, "a", "b")
		waitMembers(t, other, "a", "b")
	})
}

// Both stores refuse a ttl that is not positive and an empty ID, and
// Leave of an unknown member is no error.
func TestStoresRefuse(t *testing.T) {
	refuses := func(t *testing.T, s storage.Membership) {
		if _, err := s.Heartbeat(t.Context(), Member{ID: "x"}, 0); !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("ttl 0: %v, want ErrInvalid", err)
		}
		if _, err := s.Heartbeat(t.Context(), Member{}, time.Second); !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("empty id: %v, want ErrInvalid", err)
		}
		if err := s.Leave(t.Context(), "nobody"); err != nil {
			t.Errorf("leave unknown: %v", err)
		}
	}
	t.Run("memory", func(t *testing.T) {
		mc := memcache.New(memcache.Options{})
		defer mc.Close()
		refuses(t, mc)
	})
	t.Run("redis", func(t *testing.T) { refuses(t, testRedis(t)) })
}
