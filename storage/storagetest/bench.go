package storagetest

import (
	"fmt"
	"testing"

	"github.com/troupe-gw/troupe/storage"
)

// BenchAccountReload compares reloading n accounts with ListAccounts (every
// row read and its credentials decrypted) against the change feed
// (AccountChanges from the last version): "feed-steady" is a reload with
// nothing changed, "feed-one-change" one after a single account's change
// (its PutAccount excluded from the time). rows/op counts the account rows
// read, decrypts/op those whose credentials were opened. The steady feed
// must read no row: the benchmark fails otherwise.
func BenchAccountReload(b *testing.B, s storage.Store, n int) {
	for i := range n {
		if _, err := s.PutAccount(b.Context(), SampleAccount(fmt.Sprintf("bench-%05d", i))); err != nil {
			b.Fatal(err)
		}
	}
	report := func(b *testing.B, rows, decrypts, ops int) {
		b.ReportMetric(float64(rows)/float64(ops), "rows/op")
		b.ReportMetric(float64(decrypts)/float64(ops), "decrypts/op")
	}
	b.Run(fmt.Sprintf("list-%d", n), func(b *testing.B) {
		b.ReportAllocs()
		rows, ops := 0, 0
		for b.Loop() {
			l, err := s.ListAccounts(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			rows += len(l)
			ops++
		}
		report(b, rows, rows, ops)
	})
	full, err := s.AccountChanges(b.Context(), 0, false)
	if err != nil || len(full.Accounts) != n {
		b.Fatalf("full read: %d accounts, %v", len(full.Accounts), err)
	}
	b.Run(fmt.Sprintf("feed-steady-%d", n), func(b *testing.B) {
		b.ReportAllocs()
		rows, ops := 0, 0
		for b.Loop() {
			ch, err := s.AccountChanges(b.Context(), full.Version, true)
			if err != nil {
				b.Fatal(err)
			}
			if len(ch.Accounts)+len(ch.Deleted) != 0 || ch.Version != full.Version {
				b.Fatalf("steady read: %d accounts, %d deleted, version %d (was %d)", len(ch.Accounts), len(ch.Deleted), ch.Version, full.Version)
			}
			rows += len(ch.Accounts)
			ops++
		}
		report(b, rows, rows, ops)
	})
	b.Run(fmt.Sprintf("feed-one-change-%d", n), func(b *testing.B) {
		b.ReportAllocs()
		acc := full.Accounts[0]
		acc.Sealed = ""
		acc.Credentials = SampleAccount(acc.Name).Credentials
		since := full.Version
		rows, decrypts, ops := 0, 0, 0
		for b.Loop() {
			b.StopTimer()
			acc.Priority++
			if _, err := s.PutAccount(b.Context(), acc); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			ch, err := s.AccountChanges(b.Context(), since, true)
			if err != nil {
				b.Fatal(err)
			}
			if len(ch.Accounts) != 1 {
				b.Fatalf("one change read %d accounts", len(ch.Accounts))
			}
			since = ch.Version
			rows += len(ch.Accounts)
			decrypts += len(ch.Accounts)
			ops++
		}
		report(b, rows, decrypts, ops)
	})
}
