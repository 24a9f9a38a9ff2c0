package storagetest

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/journal"
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

// FlushCounts is a statistics flush of accounts accounts ("acct-00000"…)
// with keys rows each in hour, n a row, and the provider "openai"'s keys
// rows, n × accounts a row: accounts × keys + keys rows in all.
func FlushCounts(accounts, keys int, hour time.Time, n int64) []storage.AttemptCount {
	var cs []storage.AttemptCount
	for a := range accounts {
		for k := range keys {
			cs = append(cs, storage.AttemptCount{Scope: storage.StatsAccount, Subject: fmt.Sprintf("acct-%05d", a), Hour: hour, Key: 64 + 30*k, N: n})
		}
	}
	for k := range keys {
		cs = append(cs, storage.AttemptCount{Scope: storage.StatsProvider, Subject: "openai", Hour: hour, Key: 64 + 30*k, N: n * int64(accounts)})
	}
	return cs
}

// BenchUsageDuringFlush measures usage batches written through the journal
// (journal.Usage, its default one-second AttemptTimeout) back to back while
// s adds the statistics flush cs, until the flush returns; cs is added once
// before the timer, so each op adds to rows that exist. next fills recs, a
// batch, for the batch-th batch (fresh request ids). usage-max-ms is the
// longest a batch took (the journal's attempt included),
// journalled-batches/op how many went to the journal because storage did
// not commit them within the attempt timeout, flush-ms the flush's wall
// time and batches/op the batches written during it. The journal is
// emptied (written to storage) between ops, untimed.
func BenchUsageDuringFlush(b *testing.B, s interface {
	journal.Writer
	storage.AttemptStats
}, cs []storage.AttemptCount, recs []storage.UsageRecord, next func(batch int, recs []storage.UsageRecord)) {
	j, err := journal.Open(filepath.Join(b.TempDir(), "usage.journal"), s, journal.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = j.Close() })
	if err := s.AddAttemptCounts(b.Context(), cs); err != nil {
		b.Fatal(err)
	}
	var (
		batches   int
		maxWait   time.Duration
		flushWall time.Duration
	)
	journalled0 := j.Stats().Journalled
	b.ReportAllocs()
	for b.Loop() {
		done := make(chan error, 1)
		t0 := time.Now()
		go func() { done <- s.AddAttemptCounts(b.Context(), cs) }()
	loop:
		for {
			select {
			case err := <-done:
				if err != nil {
					b.Fatal(err)
				}
				flushWall += time.Since(t0)
				break loop
			default:
			}
			next(batches, recs)
			u0 := time.Now()
			if err := j.InsertUsage(b.Context(), recs); err != nil {
				b.Fatal(err)
			}
			maxWait = max(maxWait, time.Since(u0))
			batches++
		}
		b.StopTimer()
		if err := j.WaitDrained(b.Context()); err != nil { // the journal's replay, every second
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(maxWait.Microseconds())/1e3, "usage-max-ms")
	b.ReportMetric(float64(j.Stats().Journalled-journalled0)/float64(len(recs))/float64(b.N), "journalled-batches/op")
	b.ReportMetric(float64(batches)/float64(b.N), "batches/op")
	b.ReportMetric(float64(flushWall.Microseconds())/1e3/float64(b.N), "flush-ms")
}
