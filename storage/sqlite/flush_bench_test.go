package sqlite

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

// flushCounts is a statistics flush of accounts accounts with keys rows
// each in hour, and the provider's keys rows.
func flushCounts(accounts, keys int, hour time.Time, n int64) []storage.AttemptCount {
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

// BenchmarkUsageDuringFlush measures usage batches written through the
// journal (journal.Usage, its default one-second AttemptTimeout) while the
// attempt statistics' 30 s flush runs: 10,000 accounts with 6 rows each
// (60,006 rows, added to rows of the hour that exist), and batches of 500
// usage records of the recorder benchmark's form written back to back
// until the flush returns. usage-max-ms is the longest a batch took (the
// journal's attempt included), journalled-batches/op how many went to the
// journal because storage did not commit them within the attempt timeout,
// flush-ms the flush's wall time and batches/op the batches written during
// it. The journal is emptied (written to storage) between ops, untimed.
func BenchmarkUsageDuringFlush(b *testing.B) {
	s, recs, start, rng := recorderSetup(b)
	j, err := journal.Open(filepath.Join(b.TempDir(), "usage.journal"), s, journal.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = j.Close() })
	cs := flushCounts(accounts, 6, start.Truncate(time.Hour), 1)
	if err := s.AddAttemptCounts(b.Context(), cs); err != nil {
		b.Fatal(err)
	}
	var (
		n, batches int
		maxWait    time.Duration
		flushWall  time.Duration
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
				at := start.Add(time.Duration(n+i) * time.Millisecond)
				recs[i].At = at
				recs[i].RequestID = recorderRequestID(rng, at)
				recs[i].AccountID = fmt.Sprintf("acct-%05d", rng.IntN(accounts))
			}
			u0 := time.Now()
			if err := j.InsertUsage(b.Context(), recs); err != nil {
				b.Fatal(err)
			}
			maxWait = max(maxWait, time.Since(u0))
			n += len(recs)
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
