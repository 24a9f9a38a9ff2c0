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
	cs := flushCounts(3*attemptRowsPerTx/5+1, 5, hour, 2) // a bit over three transactions
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
// whose third transaction fails (its context cancelled after the second
// committed) leaves the table as it was, rows it created deleted and rows
// it added to back at their counts, and the same batch then retried is
// counted once.
func TestAddAttemptCountsUndo(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	ctx := t.Context()
	hour := time.Date(2026, 12, 6, 23, 0, 0, 0, time.UTC)
	// Rows there before: the first half of the accounts, at 7.
	accounts := 3*attemptRowsPerTx/5 + 1
	if err := s.AddAttemptCounts(ctx, flushCounts(accounts/2, 5, hour, 7)); err != nil {
		t.Fatal(err)
	}
	before := func() []storage.AttemptCount {
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
	was := before()

	cs := flushCounts(accounts, 5, hour, 2)
	fctx, cancel := context.WithCancel(ctx)
	txs := 0
	s.afterAttemptTx = func() {
		if txs++; txs == 2 {
			cancel()
		}
	}
	err := s.AddAttemptCounts(fctx, cs)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("AddAttemptCounts cancelled after two transactions = %v, want context.Canceled", err)
	}
	if txs != 2 {
		t.Fatalf("%d transactions committed before the error, want 2", txs)
	}
	if now := before(); !slices.Equal(now, was) {
		t.Fatalf("after a failed batch: %d rows, want the %d there before, unchanged", len(now), len(was))
	}

	s.afterAttemptTx = nil
	if err := s.AddAttemptCounts(ctx, cs); err != nil {
		t.Fatal(err)
	}
	got := before()
	if len(got) != len(cs) {
		t.Fatalf("after the retry: %d rows, want %d", len(got), len(cs))
	}
	for _, c := range got {
		want := int64(2)
		if c.Scope == storage.StatsProvider {
			want = 2*int64(accounts) + 7*int64(accounts/2)
		} else if c.Subject < fmt.Sprintf("acct-%05d", accounts/2) {
			want = 9
		}
		if c.N != want {
			t.Fatalf("after the retry: row %+v, want n = %d", c, want)
		}
	}
}
