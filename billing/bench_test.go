package billing_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/storage/rediscache"
	"github.com/troupe-gw/troupe/storage/sqlite"
)

// fakeStore is a billing.Store of one user and one price, answering from
// memory: the gate's and the cache's own cost, without storage's.
type fakeStore struct {
	user    storage.User
	balance int64
	price   storage.Price
}

func (f *fakeStore) GetUser(context.Context, string) (storage.User, error) { return f.user, nil }
func (f *fakeStore) Balance(context.Context, string) (int64, error)        { return f.balance, nil }
func (f *fakeStore) ListPrices(context.Context) ([]storage.Price, error) {
	return []storage.Price{f.price}, nil
}
func (f *fakeStore) ListPriceGroups(context.Context) ([]storage.PriceGroup, error) { return nil, nil }

var benchPrice = storage.Price{Model: "gpt-5", Currency: "USD", Input: 1_250_000, CachedInput: 125_000, CacheWrite: 1_562_500, Output: 10_000_000}

// BenchmarkGateAdmit is the billing cost of one user request on the gateway:
// Admit (user, allowlist, price, the user's RPM and concurrency counters,
// the hold, the balance), then Finish with its usage record and Committed
// once storage took it (the hold and the slot released). Storing the record
// is not included (it is the usage recorder's batch, off the request path).
//
//	cache=memory|redis: where the holds and counters live (Redis at
//	  TROUPE_TEST_REDIS_URL, default 127.0.0.1:6379; skipped when unreachable)
//	limits=none|rpm+conc: a user without limits (the hold alone) or with
//	  both (one more pipelined round trip)
//	store=fake|sqlite: the balance from memory, or read from an embedded
//	  SQLite store (a query per request, as in a deployment)
func BenchmarkGateAdmit(b *testing.B) {
	caches := []struct {
		name string
		open func(b *testing.B) storage.Cache
	}{
		{"memory", func(b *testing.B) storage.Cache {
			c := memcache.New(memcache.Options{SweepInterval: -1})
			b.Cleanup(func() { c.Close() })
			return c
		}},
		{"redis", func(b *testing.B) storage.Cache {
			url := cachetest.RedisURL(b)
			c, err := rediscache.New(context.Background(), url, rediscache.Options{Prefix: cachetest.RedisPrefix(b, url)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			return c
		}},
	}
	for _, cc := range caches {
		for _, limited := range []bool{false, true} {
			for _, onSQLite := range []bool{false, true} {
				name := "cache=" + cc.name + "/limits=none"
				if limited {
					name = "cache=" + cc.name + "/limits=rpm+conc"
				}
				if onSQLite {
					name += "/store=sqlite"
				} else {
					name += "/store=fake"
				}
				b.Run(name, func(b *testing.B) {
					u := storage.User{ID: "u-bench", Name: "bench"}
					if limited {
						u.RPM, u.MaxConcurrency = 1<<40, 64
					}
					var store billing.Store = &fakeStore{user: u, balance: 1 << 50, price: benchPrice}
					if onSQLite {
						store = sqliteStore(b, u)
					}
					benchAdmit(b, billing.New(store, cc.open(b), billing.Options{}), u)
				})
			}
		}
	}
}

// sqliteStore is an in-memory SQLite store holding u with a large balance
// and benchPrice.
func sqliteStore(b *testing.B, u storage.User) billing.Store {
	sealer, err := storage.NewSealer(bytes.Repeat([]byte{2, 7, 1, 8}, 8))
	if err != nil {
		b.Fatal(err)
	}
	s, err := sqlite.Open(context.Background(), sqlite.MemoryPath, sealer)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if _, err := s.CreateUser(context.Background(), u, storage.NewUser{Balance: storage.MaxAmount, Actor: "bench", Note: "start"}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.PutPrice(context.Background(), benchPrice); err != nil {
		b.Fatal(err)
	}
	return s
}

func benchAdmit(b *testing.B, g *billing.Gate, u storage.User) {
	ctx := context.Background()
	if err := g.Reload(ctx); err != nil {
		b.Fatal(err)
	}
	req := billing.Request{ID: "req-bench", UserID: u.ID, Model: "gpt-5", Input: 1200, MaxOutput: 300}
	rec := []storage.UsageRecord{{RequestID: "req-bench", Model: "gpt-5", InputTokens: 1200, CachedTokens: 1000, OutputTokens: 250}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t, ref := g.Admit(ctx, req)
		if ref != nil {
			b.Fatalf("refused: %v", ref)
		}
		g.Finish(t, &rec[0])
		g.Committed(rec)
	}
	b.StopTimer()
	if n := g.Pending(); n != 0 {
		b.Fatalf("%d tickets left pending", n)
	}
}
