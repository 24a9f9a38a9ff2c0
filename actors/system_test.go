package actors

import (
	"context"
	"errors"
	"fmt"
	"github.com/troupe-gw/troupe/internal/poll"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

type nopTransport struct{}

func (nopTransport) Do(context.Context, *upstream.Request) (*upstream.Response, error) {
	return nil, errors.New("nop")
}

type memUsage struct {
	mu   sync.Mutex
	recs []storage.UsageRecord
}

func (m *memUsage) InsertUsage(_ context.Context, r []storage.UsageRecord) error {
	m.mu.Lock()
	m.recs = append(m.recs, r...)
	m.mu.Unlock()
	return nil
}

func (m *memUsage) CountUsage(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(len(m.recs)), nil
}

func startSystem(t testing.TB, n, limit int) (*System, *memUsage) {
	return startPool(t, n, limit, "id-%04d", 5*time.Second)
}

// startPool starts a System with n openai accounts serving model "m" (ids
// from idFormat) and waits, up to within, until all are indexed.
func startPool(t testing.TB, n, limit int, idFormat string, within time.Duration) (*System, *memUsage) {
	t.Helper()
	store := &memUsage{}
	s, err := Start(Config{Store: store, Logger: quiet, Transport: func(storage.Account) (upstream.Transport, error) { return nopTransport{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
	for i := range n {
		s.PutAccount(storage.Account{
			ID: fmt.Sprintf(idFormat, i), Name: fmt.Sprintf("acct-"+idFormat[3:], i),
			Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxConcurrency: limit,
		})
	}
	poll.UntilState(t, within, fmt.Sprintf("%d accounts indexed", n), func() (bool, string) {
		st, _ := s.SchedulerStats(context.Background())
		return st.Accounts == n && len(s.Views()) == n, fmt.Sprintf("%d indexed, %d views", st.Accounts, len(s.Views()))
	})
	return s, store
}

// waitFor waits for cond, state the actors publish asynchronously, failing
// t after 30 s (a bound for a loaded machine, not a measure).
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	waitWithin(t, 30*time.Second, cond)
}

// waitWithin is waitFor with a deadline of d.
func waitWithin(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	poll.Until(t, d, "the condition", cond)
}

func TestNeverOverAdmits(t *testing.T) {
	const accounts, limit, workers = 20, 2, 400
	s, _ := startSystem(t, accounts, limit)
	var inflight [accounts]atomic.Int32
	var maxSeen [accounts]atomic.Int32
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range workers {
		wg.Go(func() {
			l, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 10 * time.Second})
			if err != nil {
				failed.Add(1)
				t.Error(err)
				return
			}
			var i int
			fmt.Sscanf(l.AccountID, "id-%d", &i)
			n := inflight[i].Add(1)
			for {
				m := maxSeen[i].Load()
				if n <= m || maxSeen[i].CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
			inflight[i].Add(-1)
			s.Release(l, Outcome{Status: 200})
		})
	}
	wg.Wait()
	for i := range accounts {
		if m := maxSeen[i].Load(); m > limit {
			t.Errorf("account %d saw %d in flight, limit %d", i, m, limit)
		}
	}
	waitFor(t, func() bool {
		for _, v := range s.Views() {
			if v.InFlight != 0 {
				return false
			}
		}
		return true
	})
}

// The system runs in a synctest bubble in the tests below: its timers and
// the test's deadlines run on the bubble's clock, and synctest.Wait returns
// once every goroutine is blocked, so a request that went to the scheduler
// is parked (or answered) by then.

func TestWaiterWokenOnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := startSystem(t, 1, 1)
		ctx := context.Background()
		l1, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		// Without waiting the second request is refused at once.
		if _, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m"}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("got %v, want ErrUnavailable", err)
		}
		got := make(chan *Lease, 1)
		go func() {
			l, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 5 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("second acquire granted while the account was full")
		default:
		}
		if st, _ := s.SchedulerStats(ctx); st.Waiters != 1 {
			t.Fatalf("%d waiters, want the second acquire parked", st.Waiters)
		}
		s.Release(l1, Outcome{Status: 200})
		select {
		case l2 := <-got:
			s.Release(l2, Outcome{Status: 200})
		case <-time.After(2 * time.Second):
			t.Fatal("waiter not woken by release")
		}
	})
}

func TestFIFOWakeUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := startSystem(t, 1, 1)
		ctx := context.Background()
		hold, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		order := make(chan int, 5)
		for i := range 5 {
			go func() {
				l, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 5 * time.Second})
				if err != nil {
					t.Error(err)
					return
				}
				order <- i
				s.Release(l, Outcome{Status: 200})
			}()
			synctest.Wait() // request i is parked before i+1 is sent
		}
		s.Release(hold, Outcome{Status: 200})
		for want := range 5 {
			select {
			case got := <-order:
				if got != want {
					t.Fatalf("woken %d, want %d (FIFO)", got, want)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("timeout")
			}
		}
	})
}

func TestAbandonedAcquireLeaksNothing(t *testing.T) {
	s, _ := startSystem(t, 1, 1)
	hold, _ := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m"})
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		_, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: time.Second})
		cancel()
		if err == nil {
			t.Fatal("acquire succeeded on a full account")
		}
	}
	s.Release(hold, Outcome{Status: 200})
	waitFor(t, func() bool { v, _ := s.View("id-0000"); return v.InFlight == 0 })
	// The account is usable again: abandoned waiters were not granted leases.
	l, err := s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.Release(l, Outcome{Status: 200})
	s.Release(l, Outcome{Status: 200}) // double release is harmless
	waitFor(t, func() bool { v, _ := s.View("id-0000"); return v.InFlight == 0 })
}

func TestNoAccountAndExclude(t *testing.T) {
	s, _ := startSystem(t, 2, 1)
	ctx := context.Background()
	if _, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "other"}); !errors.Is(err, ErrNoAccount) {
		t.Fatalf("unknown model: %v", err)
	}
	if _, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Messages, Model: "m", Native: true, MaxWait: time.Second}); !errors.Is(err, ErrNoAccount) {
		t.Fatalf("no account speaks messages natively: %v", err)
	}
	l, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m", Exclude: []string{"id-0000"}})
	if err != nil || l.AccountID != "id-0001" {
		t.Fatalf("exclude: %v %v", l, err)
	}
	s.Release(l, Outcome{})
}

func TestCooldownOnQuota(t *testing.T) {
	s, _ := startSystem(t, 2, 4)
	ctx := context.Background()
	l, _ := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m"})
	id := l.AccountID
	s.Release(l, Outcome{Status: 429, Verdict: upstream.Verdict{Class: upstream.ClassQuota, RetryAfter: time.Hour}})
	waitFor(t, func() bool { v, _ := s.View(id); return v.Status == StatusCooling })
	for range 20 {
		l, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Chat, Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		if l.AccountID == id {
			t.Fatal("cooling account was picked")
		}
		s.Release(l, Outcome{Status: 200})
	}
	v, _ := s.View(id)
	if v.CooldownReason != "quota" || time.Until(v.CooldownUntil) < 59*time.Minute {
		t.Fatalf("cooldown %q until %v", v.CooldownReason, v.CooldownUntil)
	}
}

func TestUsageFlushedOnStop(t *testing.T) {
	store := &memUsage{}
	s, err := Start(Config{Store: store, Transport: func(storage.Account) (upstream.Transport, error) { return nopTransport{}, nil }, UsageInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1234 {
		s.Record(storage.UsageRecord{RequestID: fmt.Sprint(i)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := store.CountUsage(ctx); n != 1234 {
		t.Fatalf("stored %d of 1234", n)
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("accounts=%d", n), func(b *testing.B) {
			s, _ := startSystem(b, n, 4)
			ctx := context.Background()
			req := AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: time.Second}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l, err := s.Acquire(ctx, req)
					if err != nil {
						b.Error(err)
						return
					}
					s.Release(l, Outcome{Status: 200})
				}
			})
		})
	}
}

var quiet = slog.New(slog.DiscardHandler)

// TestEveryProtocolReachesEveryProvider checks that an account is a candidate
// for every client protocol, and that Native narrows the candidates to the
// providers speaking the client's protocol themselves.
func TestEveryProtocolReachesEveryProvider(t *testing.T) {
	s, _ := startSystem(t, 1, 4) // one openai account serving "m"
	s.PutAccount(storage.Account{ID: "id-anth", Name: "anth", Provider: storage.ProviderAnthropic, Models: []string{"m"}, MaxConcurrency: 4})
	waitFor(t, func() bool { _, ok := s.View("id-anth"); return ok })
	ctx := context.Background()
	for _, ep := range []translate.Protocol{translate.Chat, translate.Responses, translate.Messages} {
		seen := map[string]bool{}
		for range 2 {
			l, err := s.Acquire(ctx, AcquireRequest{Endpoint: ep, Model: "m", Exclude: keys(seen), MaxWait: time.Second})
			if err != nil {
				t.Fatalf("%s: %v", ep, err)
			}
			seen[l.AccountID] = true
			defer s.Release(l, Outcome{})
		}
		if !seen["id-0000"] || !seen["id-anth"] {
			t.Errorf("%s: candidates %v, want both accounts", ep, seen)
		}
	}
	l, err := s.Acquire(ctx, AcquireRequest{Endpoint: translate.Messages, Model: "m", Native: true})
	if err != nil || l.AccountID != "id-anth" {
		t.Fatalf("native messages: %v %v, want id-anth", l, err)
	}
	s.Release(l, Outcome{})
	l, err = s.Acquire(ctx, AcquireRequest{Endpoint: translate.Responses, Model: "m", Native: true})
	if err != nil || l.AccountID != "id-0000" {
		t.Fatalf("native responses: %v %v, want id-0000", l, err)
	}
	s.Release(l, Outcome{})
	// The only native account already tried: no waiting, it is not coming back.
	before, _ := s.SchedulerStats(ctx)
	_, err = s.Acquire(ctx, AcquireRequest{Endpoint: translate.Responses, Model: "m", Native: true, Exclude: []string{"id-0000"}, MaxWait: 5 * time.Second})
	after, _ := s.SchedulerStats(ctx)
	if !errors.Is(err, ErrUnavailable) || after.Parked != before.Parked {
		t.Fatalf("native responses without its account: %v, parked %d times, want ErrUnavailable without waiting", err, after.Parked-before.Parked)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A granted lease is not published: readers see its counters at once, from
// the snapshot, and the published view is copied only for them.
func TestGrantCountersWithoutPublish(t *testing.T) {
	s, _ := startSystem(t, 1, 2)
	l, err := s.Acquire(context.Background(), chatM)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.View(l.AccountID); v.InFlight != 1 || v.Requests != 1 {
		t.Fatalf("View after grant: inflight %d, requests %d", v.InFlight, v.Requests)
	}
	if vs := s.Views(); len(vs) != 1 || vs[0].InFlight != 1 {
		t.Fatalf("Views after grant: %+v", vs)
	}
	var seen *View
	s.EachView(func(v *View) { seen = v })
	if seen == nil || seen.InFlight != 1 || seen.Requests != 1 {
		t.Fatalf("EachView after grant: %+v", seen)
	}
	s.Release(l, Outcome{Status: 200})
	waitFor(t, func() bool { v, _ := s.View(l.AccountID); return v.InFlight == 0 && v.Successes == 1 })
	var a, b *View
	s.EachView(func(v *View) { a = v })
	s.EachView(func(v *View) { b = v })
	if a != b {
		t.Errorf("EachView copied a view whose counters had not moved")
	}
}

// The scheduler counts the grants an account has not handled yet on top of
// its views: a view published before the account saw two grants (a release,
// say) does not bring the in-flight count back down.
func TestSchedulerCountsPendingGrants(t *testing.T) {
	sc := newScheduler(schedulerConfig{policy: LeastInFlight{}, maxWaiter: 10, log: quiet, now: time.Now})().(*scheduler)
	pid := &actor.PID{ID: "id-0"}
	v := View{ID: "id-0", Name: "a", Provider: storage.ProviderOpenAI, MaxInFlight: 4, Version: 1, ConfigGen: 1, InFlight: 1, Requests: 5}
	sc.onView(nil, &v, pid, nil, 0)
	e := sc.byID["id-0"]
	e.sent, e.extra = 2, 2 // two grant requests sent (scheduler.grant)
	for _, c := range []struct {
		inFlight int
		answered uint64
		want     int
	}{
		{0, 0, 2}, // the release, published before either grant was handled
		{1, 1, 2}, // the first granted; the second still pending
		{1, 2, 1}, // the second refused
	} {
		v.Version++
		v.InFlight, v.Requests = c.inFlight, 5
		pub := v // a fresh view each time, as an account publishes
		sc.onView(nil, &pub, nil, nil, c.answered)
		if e.inFlight() != c.want {
			t.Errorf("view inflight %d, answered %d: scheduler counts %d, want %d", c.inFlight, c.answered, e.inFlight(), c.want)
		}
		if e.view != &pub {
			t.Errorf("the scheduler copied the view it was given")
		}
	}
	if v.InFlight != 1 || e.view.InFlight != 1 {
		t.Errorf("onView changed the published view")
	}
}

// least_inflight reads in-flight counts, so a grant rescores its account
// at once, although the account publishes nothing: leases spread.
func TestGrantRescoresCounterReaders(t *testing.T) {
	s, _ := startSystem(t, 3, 4) // the default policy is LeastInFlight
	seen := map[string]bool{}
	var leases []*Lease
	for range 3 {
		l, err := s.Acquire(context.Background(), chatM)
		if err != nil {
			t.Fatal(err)
		}
		seen[l.AccountID] = true
		leases = append(leases, l)
	}
	if len(seen) != 3 {
		t.Errorf("3 leases went to %d accounts", len(seen))
	}
	for _, l := range leases {
		s.Release(l, Outcome{Status: 200})
	}
}

// A parked request waits out its MaxWait on the caller's timer, and an
// acquire on a stopped system ends at the stall clock's next tick instead of
// waiting for a scheduler that will not answer.
func TestAcquireWaitBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := startSystem(t, 1, 1)
		l, err := s.Acquire(context.Background(), chatM)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 150 * time.Millisecond})
		if waited := time.Since(start); !errors.Is(err, ErrBusy) || waited != 150*time.Millisecond {
			t.Fatalf("parked acquire: %v after %s, want ErrBusy after 150ms", err, waited)
		}
		s.Release(l, Outcome{Status: 200})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		_, err = s.Acquire(context.Background(), AcquireRequest{Endpoint: translate.Chat, Model: "m", MaxWait: 30 * time.Second})
		if waited := time.Since(start); err == nil || waited > stallTick {
			t.Fatalf("acquire after Stop: %v after %s, want an error within a stall tick", err, waited)
		}
	})
}

// BenchmarkViews reports what reading every account's view costs at 10,000
// idle accounts: Views (a copy of each, in a slice it grows) against
// EachView (in place), which readers that only look should use.
func BenchmarkViews(b *testing.B) {
	s, _ := startSystem(b, 10000, 4)
	b.Run("Views", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			for _, v := range s.Views() {
				if v.Status == StatusActive {
					n++
				}
			}
			if n != 10000 {
				b.Fatalf("%d active", n)
			}
		}
	})
	b.Run("EachView", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n := 0
			s.EachView(func(v *View) {
				if v.Status == StatusActive {
					n++
				}
			})
			if n != 10000 {
				b.Fatalf("%d active", n)
			}
		}
	})
}
