package actors

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/postgres"
	"github.com/troupe-gw/troupe/storage/sqlite"
	"github.com/troupe-gw/troupe/storage/storagetest"
	"github.com/troupe-gw/troupe/upstream"
)

// TestErrorEventsThroughRecorder sends failed attempts through
// System.RecordErrors, interleaved with usage records, and stops the system
// gracefully: every event is in storage, on SQLite and on PostgreSQL.
func TestErrorEventsThroughRecorder(t *testing.T) {
	backends := []struct {
		name string
		open func(t *testing.T) storage.Store
	}{
		{"sqlite", func(t *testing.T) storage.Store {
			s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"postgres", func(t *testing.T) storage.Store {
			s, err := postgres.Open(t.Context(), storagetest.PostgresDB(t), testSealer(t))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			store := b.open(t)
			defer store.Close()
			sys, err := Start(Config{
				Store: store, Logger: slog.New(slog.DiscardHandler), UsageBatch: 64,
				Transport: func(storage.Account) (upstream.Transport, error) { return nil, errors.New("no accounts in this test") },
			})
			if err != nil {
				t.Fatal(err)
			}
			const n = 300
			at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			recs := storagetest.SampleUsage("rq", n)
			for i := range n {
				sys.Record(recs[i])
				evs := make([]storage.ErrorEvent, 1+i%3)
				for j := range evs {
					evs[j] = storage.ErrorEvent{RequestID: recs[i].RequestID, Attempt: j + 1, At: at.Add(time.Duration(i) * time.Millisecond),
						AccountID: fmt.Sprint("acct-", j), Class: "transient", Status: 502, Latency: time.Duration(j+1) * time.Millisecond}
				}
				sys.RecordErrors(evs)
			}
			ctx := t.Context()
			if err := sys.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := store.ErrorEvents(ctx, storage.RequestLogQuery{Limit: 10 * n})
			if err != nil {
				t.Fatal(err)
			}
			if want := n + n/3*(1+2); len(got) != want { // 1, 2, 3 events in turn
				t.Errorf("%d error events stored, want %d", len(got), want)
			}
			if c, _ := store.CountUsage(ctx); c != n {
				t.Errorf("%d usage records, want %d", c, n)
			}
		})
	}
}
