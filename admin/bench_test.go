package admin

import (
	"context"
	"fmt"
	"testing"

	"github.com/troupe-gw/troupe/storage"
)

// BenchmarkAdminAccountsList measures one page of GET /api/admin/accounts,
// over loopback HTTP,
// over a pool of 10,000 accounts in SQLite: the whole list is read (and its
// credentials unsealed), joined with the live state and the scheduler's
// scores, filtered, sorted and paged on every request.
func BenchmarkAdminAccountsList(b *testing.B) {
	e := newAdminEnv(b, 0)
	ctx := context.Background()
	const n = 10_000
	for i := range n {
		a, err := e.store.PutAccount(ctx, storage.Account{Name: fmt.Sprintf("pool-%05d", i), Provider: storage.ProviderOpenAI,
			Models: []string{"m"}, Tags: []string{"t"}, MaxConcurrency: 4, Credentials: storage.Credentials{APIKey: "sk-upstream-secret"}})
		if err != nil {
			b.Fatal(err)
		}
		e.sys.PutAccount(a)
	}
	waitFor(b, "the pool", func() bool { return len(e.sys.Views()) == n })
	for _, q := range []string{"limit=100", "limit=100&sort=score&order=desc", "limit=100&q=pool-07&status=active"} {
		b.Run(q, func(b *testing.B) {
			c := e.withKey(e.adminKey)
			b.ReportAllocs()
			for b.Loop() {
				c.do("GET", "/api/admin/accounts?"+q, nil).want(b, 200)
			}
		})
	}
}
