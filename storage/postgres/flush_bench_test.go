package postgres

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/journal"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// BenchmarkUsageDuringFlush is storage/sqlite's: usage batches of 500
// records written through the journal (its default one-second
// AttemptTimeout) back to back while a statistics flush of 60,006 rows
// (10,000 accounts, 6 keys, plus the provider's, added to rows that exist)
// runs. PostgreSQL has no single writer: the flush's one statement holds
// its rows' locks, which no usage batch takes. usage-max-ms is the longest
// a batch took, journalled-batches/op how many went to the journal,
// flush-ms the flush's wall time, batches/op the batches written during it.
func BenchmarkUsageDuringFlush(b *testing.B) {
	s := openAt(b, storagetest.PostgresDB(b), testSealer(b))
	j, err := journal.Open(filepath.Join(b.TempDir(), "usage.journal"), s, journal.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = j.Close() })
	hour := time.Now().UTC().Truncate(time.Hour)
	var cs []storage.AttemptCount
	for a := range 10_000 {
		for k := range 6 {
			cs = append(cs, storage.AttemptCount{Scope: storage.StatsAccount, Subject: fmt.Sprintf("acct-%05d", a), Hour: hour, Key: 64 + 30*k, N: 1})
		}
	}
	for k := range 6 {
		cs = append(cs, storage.AttemptCount{Scope: storage.StatsProvider, Subject: "openai", Hour: hour, Key: 64 + 30*k, N: 10_000})
	}
	if err := s.AddAttemptCounts(b.Context(), cs); err != nil {
		b.Fatal(err)
	}
	recs := storagetest.SampleUsage("r", 500)
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
			for i := range recs {
				recs[i].RequestID = newID()
				recs[i].AccountID = fmt.Sprintf("acct-%05d", i*20+batches%20)
			}
			u0 := time.Now()
			if err := j.InsertUsage(b.Context(), recs); err != nil {
				b.Fatal(err)
			}
			maxWait = max(maxWait, time.Since(u0))
			batches++
		}
		b.StopTimer()
		for j.Stats().Pending > 0 { // the journal's replay, every second
			time.Sleep(10 * time.Millisecond)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(maxWait.Microseconds())/1e3, "usage-max-ms")
	b.ReportMetric(float64(j.Stats().Journalled-journalled0)/float64(len(recs))/float64(b.N), "journalled-batches/op")
	b.ReportMetric(float64(batches)/float64(b.N), "batches/op")
	b.ReportMetric(float64(flushWall.Microseconds())/1e3/float64(b.N), "flush-ms")
}
