package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// TestAddAttemptCountsReleasesWriter checks that a flush of several
// transactions gives the writer back between them: a usage batch written
// after the first one commits, while the flush still has rows to add,
// is stored then, and the flush's rows all arrive.
func TestAddAttemptCountsReleasesWriter(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	hour := time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC)
	cs := storagetest.FlushCounts(3*attemptRowsPerTx/5+1, 5, hour, 2) // a bit over three transactions
	txs := 0
	s.afterAttemptTx = func() {
		if txs++; txs == 1 {
			if err := s.InsertUsage(t.Context(), storagetest.SampleUsage("mid-flush", 3)); err != nil {
				t.Errorf("usage batch between the flush's transactions: %v", err)
			}
		}
	}
	if err := s.AddAttemptCounts(t.Context(), cs); err != nil {
		t.Fatal(err)
	}
	if want := (len(cs) + attemptRowsPerTx - 1) / attemptRowsPerTx; txs != want {
		t.Errorf("%d transactions for %d rows, want %d", txs, len(cs), want)
	}
	if n, err := s.CountUsage(t.Context()); err != nil || n != 3 {
		t.Errorf("CountUsage = %d, %v; want 3", n, err)
	}
	got, err := s.AttemptCounts(t.Context(), storage.StatsAccount, "", hour, hour.Add(time.Hour))
	if err != nil || len(got) != len(cs)-5 {
		t.Fatalf("AttemptCounts: %d rows, %v; want %d", len(got), err, len(cs)-5)
	}
	for _, c := range got {
		if c.N != 2 {
			t.Fatalf("row %+v, want n = 2", c)
		}
	}
}

// TestAddAttemptCountsUndo checks all or none across transactions: a batch
// whose context ends after the first of its four transactions committed
// leaves the table as it was (rows it created deleted, rows it added to
// back at their counts), and the same batch retried is counted once; one
// whose context ends after its third is finished and counted once.
func TestAddAttemptCountsUndo(t *testing.T) {
	for _, c := range []struct {
		name     string
		cancelAt int  // the transaction after which ctx is cancelled
		finished bool // the batch is finished rather than taken back
	}{
		{"taken-back", 1, false},
		{"finished", 3, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
			ctx := t.Context()
			hour := time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC)
			// Rows there before: the first half of the accounts, at 7.
			accounts := 3*attemptRowsPerTx/5 + 1 // four transactions
			if err := s.AddAttemptCounts(ctx, storagetest.FlushCounts(accounts/2, 5, hour, 7)); err != nil {
				t.Fatal(err)
			}
			rows := func() []storage.AttemptCount {
				var all []storage.AttemptCount
				for _, scope := range []storage.StatsScope{storage.StatsAccount, storage.StatsProvider} {
					got, err := s.AttemptCounts(ctx, scope, "", hour, hour.Add(time.Hour))
					if err != nil {
						t.Fatal(err)
					}
					all = append(all, got...)
				}
				return all
			}
			was := rows()

			cs := storagetest.FlushCounts(accounts, 5, hour, 2)
			fctx, cancel := context.WithCancel(ctx)
			txs := 0
			s.afterAttemptTx = func() {
				if txs++; txs == c.cancelAt {
					cancel()
				}
			}
			err := s.AddAttemptCounts(fctx, cs)
			s.afterAttemptTx = nil
			if c.finished {
				if err != nil {
					t.Fatalf("AddAttemptCounts cancelled after %d of 4 transactions = %v, want it finished", c.cancelAt, err)
				}
			} else {
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("AddAttemptCounts cancelled after %d of 4 transactions = %v, want context.Canceled", c.cancelAt, err)
				}
				if now := rows(); !slices.Equal(now, was) {
					t.Fatalf("after a failed batch: %d rows, want the %d there before, unchanged", len(now), len(was))
				}
				if err := s.AddAttemptCounts(ctx, cs); err != nil { // the caller's retry
					t.Fatal(err)
				}
			}
			got := rows()
			if len(got) != len(cs) {
				t.Fatalf("after the batch: %d rows, want %d", len(got), len(cs))
			}
			for _, r := range got {
				want := int64(2)
				if r.Scope == storage.StatsProvider {
					want = 2*int64(accounts) + 7*int64(accounts/2)
				} else if r.Subject < fmt.Sprintf("acct-%05d", accounts/2) {
					want = 9
				}
				if r.N != want {
					t.Fatalf("after the batch: row %+v, want n = %d", r, want)
				}
			}
		})
	}
}
