package storagetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// testAttemptStats checks the attempt statistics rollup: counts add up by
// row (within a batch, across batches and across concurrent writers),
// reads select by scope, subject and hour, invalid counts write nothing,
// and pruning deletes by hour.
func testAttemptStats(t *testing.T, s storage.Store) {
	as, ok := s.(storage.AttemptStats)
	if !ok {
		t.Fatalf("%T does not implement storage.AttemptStats", s)
	}
	c := ctx(t)
	h0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	h1 := h0.Add(time.Hour)
	acc := func(sub string, h time.Time, key int, n int64) storage.AttemptCount {
		return storage.AttemptCount{Scope: storage.StatsAccount, Subject: sub, Hour: h, Key: key, N: n}
	}
	if err := as.AddAttemptCounts(c, []storage.AttemptCount{
		acc("a1", h0.Add(17*time.Minute), 3, 2), // truncated to its hour
		acc("a1", h0, 3, 1),                     // same row: adds up
		acc("a1", h1, 3, 5),
		acc("a2", h0, 70, 1),
		{Scope: storage.StatsProvider, Subject: "openai", Hour: h0, Key: 3, N: 4},
	}); err != nil {
		t.Fatal(err)
	}
	if err := as.AddAttemptCounts(c, []storage.AttemptCount{acc("a1", h0, 3, 10), acc("a1", h0, 1023, 1<<40)}); err != nil {
		t.Fatal(err)
	}
	// Invalid: nothing of the batch is written.
	for _, bad := range []storage.AttemptCount{acc("a1", h0, -1, 1), acc("a1", h0, storage.MaxStatsKey+1, 1), {Scope: 9, Subject: "a1", Hour: h0, Key: 1, N: 1}} {
		if err := as.AddAttemptCounts(c, []storage.AttemptCount{acc("a1", h0, 3, 100), bad}); !errors.Is(err, storage.ErrInvalid) {
			t.Fatalf("AddAttemptCounts(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	got, err := as.AttemptCounts(c, storage.StatsAccount, "a1", h0, h1.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want := []storage.AttemptCount{acc("a1", h0, 3, 13), acc("a1", h0, 1023, 1<<40), acc("a1", h1, 3, 5)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("AttemptCounts(a1) = %+v, want %+v", got, want)
	}
	if got, err = as.AttemptCounts(c, storage.StatsAccount, "", h0, h1); err != nil {
		t.Fatal(err)
	}
	if want := []storage.AttemptCount{acc("a1", h0, 3, 13), acc("a1", h0, 1023, 1<<40), acc("a2", h0, 70, 1)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("AttemptCounts(every account, first hour) = %+v, want %+v", got, want)
	}
	if got, err = as.AttemptCounts(c, storage.StatsProvider, "openai", h0, h1); err != nil || len(got) != 1 || got[0].N != 4 {
		t.Fatalf("AttemptCounts(provider) = %+v, %v", got, err)
	}
	if got, err = as.AttemptCounts(c, storage.StatsAccount, "a3", h0, h1); err != nil || len(got) != 0 {
		t.Fatalf("AttemptCounts(unknown) = %+v, %v", got, err)
	}
	tot, err := as.AttemptTotals(c, storage.StatsAccount, "", h0, h1.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	wantTot := []storage.AttemptCount{acc("a1", h0, 3, 18), acc("a1", h0, 1023, 1<<40), acc("a2", h0, 70, 1)}
	if !reflect.DeepEqual(tot, wantTot) {
		t.Fatalf("AttemptTotals(every account) = %+v, want %+v", tot, wantTot)
	}
	if tot, err = as.AttemptTotals(c, storage.StatsAccount, "a2", h1, h1.Add(time.Hour)); err != nil || len(tot) != 0 {
		t.Fatalf("AttemptTotals(a2, second hour) = %+v, %v; want none", tot, err)
	}
	subs, err := as.AttemptSubjects(c, storage.StatsAccount, h1, h1.Add(time.Hour))
	if err != nil || !reflect.DeepEqual(subs, []string{"a1"}) {
		t.Fatalf("AttemptSubjects(second hour) = %v, %v", subs, err)
	}

	// Concurrent writers of the same rows (several instances' flushes).
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 10 {
				if err := as.AddAttemptCounts(c, []storage.AttemptCount{acc("a2", h1, 5, 1), acc("a1", h1, 3, 1),
					{Scope: storage.StatsProvider, Subject: "openai", Hour: h1, Key: 3, N: 1}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if got, err = as.AttemptCounts(c, storage.StatsAccount, "a1", h1, h1.Add(time.Hour)); err != nil || len(got) != 1 || got[0].N != 45 {
		t.Fatalf("after concurrent adds: %+v, %v; want one row of 45", got, err)
	}

	n, err := as.PruneAttemptCounts(c, h1)
	if err != nil || n != 4 {
		t.Fatalf("PruneAttemptCounts = %d, %v; want 4 rows", n, err)
	}
	if got, err = as.AttemptCounts(c, storage.StatsAccount, "", time.Time{}, h1.Add(time.Hour)); err != nil || len(got) != 2 {
		t.Fatalf("after prune: %+v, %v; want the second hour's two rows", got, err)
	}

	// A flush's worth of rows in one batch (backends may write it in
	// several statements), each row's counts far apart in it, and subjects
	// that need quoting or cleaning.
	h2 := h0.Add(48 * time.Hour)
	odd := []string{`quo"te`, `back\slash`, "tab\tnew\nline\x01", "é🙂", "bad\xffutf8", ""}
	var big []storage.AttemptCount
	for round := range 2 {
		for i := range 1500 {
			big = append(big, acc(fmt.Sprintf("big-%04d", i), h2, i%7, int64(1+round)))
		}
		for _, sub := range odd {
			big = append(big, acc(sub, h2, 1, 10))
		}
	}
	if err := as.AddAttemptCounts(c, big); err != nil {
		t.Fatal(err)
	}
	if got, err = as.AttemptCounts(c, storage.StatsAccount, "", h2, h2.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantN := map[string]int64{}
	for i := range 1500 {
		wantN[fmt.Sprintf("big-%04d", i)] = 3
	}
	for _, sub := range odd {
		wantN[storage.CleanText(sub)] = 20
	}
	if len(got) != len(wantN) {
		t.Fatalf("after a batch of %d counts: %d rows, want %d", len(big), len(got), len(wantN))
	}
	for _, r := range got {
		if n, ok := wantN[r.Subject]; !ok || r.N != n || !r.Hour.Equal(h2) {
			t.Fatalf("after a batch of %d counts: row %+v, want N %d (known: %v)", len(big), r, n, ok)
		}
	}
}
