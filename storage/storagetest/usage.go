package storagetest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// UsageStart is the time of the first record of VariedUsage: 2026-03-01 10:00 UTC.
var UsageStart = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// VariedUsage returns n usage records with request ids prefix-first …
// prefix-(first+n-1), spread over keys, accounts (one of them ""), models and
// statuses, one every 1.3 s from UsageStart+first×1.3 s, so that a batch
// touches several rollup rows and 100,000 records span about 36 hours. The
// same arguments always give the same records.
func VariedUsage(prefix string, first, n int) []storage.UsageRecord {
	keys := []string{"key-a", "key-b", "Key-C", "key-d"} // "Key-C" sorts first bytewise
	accounts := []string{"acct-1", "acct-2", "acct-3", "", "acct-5", "Acct-6"}
	models := []string{"gpt-5", "gpt-5-mini", "claude-sonnet"}
	recs := make([]storage.UsageRecord, n)
	for j := range recs {
		i := first + j
		h := uint64(i)*0x9E3779B97F4A7C15 + 12345 // spreads i over the dimensions
		h ^= h >> 29
		status := 200
		switch h % 10 {
		case 8:
			status = 429
		case 9:
			status = 500
		}
		recs[j] = storage.UsageRecord{
			RequestID:       fmt.Sprintf("%s-%d", prefix, i),
			At:              UsageStart.Add(time.Duration(i) * 1300 * time.Millisecond),
			KeyID:           keys[(h>>8)%uint64(len(keys))],
			AccountID:       accounts[(h>>16)%uint64(len(accounts))],
			Model:           models[(h>>24)%uint64(len(models))],
			Route:           "responses",
			Stream:          h%2 == 0,
			Status:          status,
			Attempts:        1 + int(h%3),
			Latency:         time.Duration(h%5000) * time.Millisecond,
			TTFT:            time.Duration(h%700) * time.Millisecond,
			InputTokens:     int64(h % 100000),
			CachedTokens:    int64(h % 1000),
			OutputTokens:    int64(h % 30000),
			ReasoningTokens: int64(h % 500),
			Cost:            int64(h%3) * int64(h%1_000_003), // a third cost nothing (no price)
		}
	}
	return recs
}

// RollupsOf computes the hourly rollups of recs as a backend must store
// them: the first record of each RequestID counts, later ones are skipped;
// the hour is At, at millisecond precision, truncated to the UTC hour; the
// cost is the sum of the records' Cost, each clamped as
// storage.UsageRecord.Bound does. The result is ordered like
// storage.Usage.Rollups.
func RollupsOf(recs []storage.UsageRecord) []storage.UsageRollup {
	type key struct {
		hour                    int64
		keyID, accountID, model string
		status                  int
	}
	seen := make(map[string]bool, len(recs))
	groups := map[key]*storage.UsageRollup{}
	for _, r := range recs {
		if seen[r.RequestID] {
			continue
		}
		seen[r.RequestID] = true
		ms := r.At.UnixMilli()
		hour := ms - ms%3_600_000
		if ms%3_600_000 < 0 {
			hour -= 3_600_000
		}
		k := key{hour, r.KeyID, r.AccountID, r.Model, r.Status}
		g := groups[k]
		if g == nil {
			g = &storage.UsageRollup{Hour: time.UnixMilli(hour).UTC(), KeyID: r.KeyID, AccountID: r.AccountID, Model: r.Model, Status: r.Status}
			groups[k] = g
		}
		g.Requests++
		g.InputTokens += r.InputTokens
		g.CachedTokens += r.CachedTokens
		g.OutputTokens += r.OutputTokens
		g.ReasoningTokens += r.ReasoningTokens
		g.Cost += min(max(r.Cost, 0), storage.MaxAmount)
	}
	out := make([]storage.UsageRollup, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	slices.SortFunc(out, compareRollups)
	return out
}

func compareRollups(a, b storage.UsageRollup) int {
	return cmp.Or(
		a.Hour.Compare(b.Hour),
		strings.Compare(a.KeyID, b.KeyID),
		strings.Compare(a.AccountID, b.AccountID),
		strings.Compare(a.Model, b.Model),
		cmp.Compare(a.Status, b.Status),
	)
}

// filterRollups returns the rows of rs that q selects.
func filterRollups(rs []storage.UsageRollup, q storage.UsageQuery) []storage.UsageRollup {
	var out []storage.UsageRollup
	for _, r := range rs {
		if (!q.From.IsZero() && r.Hour.Before(q.From)) || (!q.To.IsZero() && !r.Hour.Before(q.To)) ||
			(q.KeyID != "" && r.KeyID != q.KeyID) || (q.AccountID != "" && r.AccountID != q.AccountID) ||
			(q.Model != "" && r.Model != q.Model) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// EqualRollups fails t unless got and want hold the same rows in the same
// order (hours compared with Equal), naming the first difference.
func EqualRollups(t testing.TB, what string, got, want []storage.UsageRollup) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d rollup rows, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if !g.Hour.Equal(w.Hour) || g.Hour.Location() != time.UTC {
			t.Errorf("%s: row %d: hour %v, want %v (UTC)", what, i, g.Hour, w.Hour)
			return
		}
		g.Hour = w.Hour
		if g != w {
			t.Errorf("%s: row %d:\n got %+v\nwant %+v", what, i, g, w)
			return
		}
	}
}

// WriteLoad writes the records VariedUsage(prefix, 0, n) through s.InsertUsage
// in batches of batch records from workers goroutines at once, the way a
// loaded gateway's recorders would, and returns them. To prove that
// duplicates are never counted, every fifth batch is written twice (a retry
// after an ambiguous failure), and every seventh is written by two workers
// at the same time. Any InsertUsage error fails t.
func WriteLoad(t testing.TB, s storage.Usage, prefix string, n, batch, workers int) []storage.UsageRecord {
	t.Helper()
	recs := VariedUsage(prefix, 0, n)
	nb := (n + batch - 1) / batch
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for j := range nb {
				mine := j%workers == w
				twin := j%7 == 0 && (j+1)%workers == w && workers > 1
				if !mine && !twin {
					continue
				}
				b := recs[j*batch : min((j+1)*batch, n)]
				times := 1
				if mine && j%5 == 0 {
					times = 2
				}
				for range times {
					if err := s.InsertUsage(t.Context(), b); err != nil {
						errs <- fmt.Errorf("worker %d, batch %d: %w", w, j, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return recs
}

// CheckUsage fails t unless s holds exactly the records of recs (counted by
// CountUsage, duplicates of a RequestID counting once) and its rollups are
// exactly RollupsOf(recs).
func CheckUsage(t testing.TB, s storage.Usage, recs []storage.UsageRecord) {
	t.Helper()
	distinct := map[string]struct{}{}
	for _, r := range recs {
		distinct[r.RequestID] = struct{}{}
	}
	n, err := s.CountUsage(t.Context())
	if err != nil {
		t.Fatalf("CountUsage: %v", err)
	}
	if n != int64(len(distinct)) {
		t.Errorf("CountUsage = %d, want %d", n, len(distinct))
	}
	got, err := s.Rollups(t.Context(), storage.UsageQuery{})
	if err != nil {
		t.Fatalf("Rollups: %v", err)
	}
	EqualRollups(t, "Rollups", got, RollupsOf(recs))
}

func rollups(t *testing.T, s storage.Store, q storage.UsageQuery) []storage.UsageRollup {
	t.Helper()
	r, err := s.Rollups(ctx(t), q)
	if err != nil {
		t.Fatalf("Rollups(%+v): %v", q, err)
	}
	return r
}

func insert(t *testing.T, s storage.Store, recs []storage.UsageRecord) {
	t.Helper()
	if err := s.InsertUsage(ctx(t), recs); err != nil {
		t.Fatalf("InsertUsage(%d records): %v", len(recs), err)
	}
}

func testUsageRollups(t *testing.T, s storage.Store) {
	if r := rollups(t, s, storage.UsageQuery{}); len(r) != 0 {
		t.Fatalf("Rollups on an empty store = %v", r)
	}
	var all []storage.UsageRecord
	for i := 0; i < 1000; i += 100 {
		b := VariedUsage("r", i, 100)
		insert(t, s, b)
		all = append(all, b...)
	}
	// Records on either side of an hour boundary, and one without account.
	edge := []storage.UsageRecord{
		{RequestID: "edge-1", At: time.Date(2026, 3, 5, 10, 59, 59, 999_000_000, time.UTC), KeyID: "k", Model: "m", Status: 200, InputTokens: 1},
		{RequestID: "edge-2", At: time.Date(2026, 3, 5, 11, 0, 0, 0, time.UTC), KeyID: "k", Model: "m", Status: 200, InputTokens: 2},
		{RequestID: "edge-3", At: time.Date(2026, 3, 5, 11, 59, 59, 999_999_999, time.Local), KeyID: "k", Model: "m", Status: 200, InputTokens: 4},
	}
	insert(t, s, edge)
	all = append(all, edge...)
	want := RollupsOf(all)
	got := rollups(t, s, storage.UsageQuery{})
	EqualRollups(t, "all rollups", got, want)
	if len(want) < 50 {
		t.Fatalf("the sample has only %d rollup rows", len(want))
	}
	var requests, cost, wantCost int64
	for _, r := range got {
		requests += r.Requests
		cost += r.Cost
	}
	for _, r := range all {
		wantCost += r.Cost
	}
	if cost != wantCost || cost == 0 {
		t.Errorf("rollups cost %d micro-units in all, want %d (not 0)", cost, wantCost)
	}
	if requests != int64(len(all)) {
		t.Errorf("rollups count %d requests, want %d", requests, len(all))
	}
	if n := count(t, s); n != int64(len(all)) {
		t.Errorf("CountUsage = %d, want %d", n, len(all))
	}
}

func testUsageRollupsQuery(t *testing.T, s storage.Store) {
	recs := VariedUsage("q", 0, 1500)
	for i := range recs { // 17 s apart: about 7 hours
		recs[i].At = UsageStart.Add(time.Duration(i) * 17 * time.Second)
	}
	insert(t, s, recs)
	all := RollupsOf(recs)
	h := func(n int) time.Time { return UsageStart.Add(time.Duration(n) * time.Hour) }
	for _, q := range []storage.UsageQuery{
		{},
		{From: h(2)},
		{To: h(3)},
		{From: h(2), To: h(4)},
		{From: h(2).Add(time.Minute), To: h(4)}, // 02:01 excludes the 02:00 rows
		{From: h(2), To: h(2)},
		{From: h(-5), To: h(100)},
		{KeyID: "Key-C"},
		{AccountID: "acct-2"},
		{Model: "gpt-5"},
		{KeyID: "key-a", AccountID: "Acct-6", Model: "claude-sonnet", From: h(1), To: h(6)},
		{KeyID: "nobody"},
	} {
		want := filterRollups(all, q)
		got := rollups(t, s, q)
		EqualRollups(t, fmt.Sprintf("Rollups(%+v)", q), got, want)
	}
	if len(filterRollups(all, storage.UsageQuery{From: h(2), To: h(4)})) == 0 {
		t.Fatal("the sample has no rows between 02:00 and 04:00")
	}
}

func testUsageRollupsSkipDuplicates(t *testing.T, s storage.Store) {
	first := VariedUsage("d", 0, 200)
	insert(t, s, first)
	before := rollups(t, s, storage.UsageQuery{})

	// A retried batch: nothing changes.
	insert(t, s, first)
	EqualRollups(t, "after a retried batch", rollups(t, s, storage.UsageQuery{}), before)

	// A batch mixing new records with stored ones, and a record repeated
	// within the batch with other values (the first one counts).
	mixed := append(VariedUsage("d", 150, 100), VariedUsage("e", 0, 50)...)
	dup := mixed[len(mixed)-1]
	dup.InputTokens += 1_000_000
	dup.Status = 503
	mixed = append(mixed, dup)
	insert(t, s, mixed)
	all := append(append([]storage.UsageRecord{}, first...), mixed...)
	CheckUsage(t, s, all)

	// A refused batch (one invalid record) changes no rollup either.
	bad := VariedUsage("f", 0, 20)
	bad[10].RequestID = ""
	wantErr(t, "InsertUsage(invalid record)", s.InsertUsage(ctx(t), bad), storage.ErrInvalid)
	CheckUsage(t, s, all)
}

func testUsageRollupsConcurrentRetries(t *testing.T, s storage.Store) {
	recs := WriteLoad(t, s, "c", 6000, 250, 6)
	CheckUsage(t, s, recs)
}

func testUsagePrune(t *testing.T, s storage.Store) {
	cut := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	// 6,001 old records, one per hour (so as many rollup rows: both prunes
	// need more than one batch), the newest one hour before the cut-off.
	old := make([]storage.UsageRecord, 6001)
	for i := range old {
		old[i] = storage.UsageRecord{
			RequestID: fmt.Sprintf("old-%d", i), At: cut.Add(-time.Duration(i+1)*time.Hour + 30*time.Minute),
			KeyID: "k", AccountID: "a", Model: "m", Status: 200, InputTokens: 10,
		}
	}
	for i := 0; i < len(old); i += 1000 {
		insert(t, s, old[i:min(i+1000, len(old))])
	}
	// Records at and after the cut-off stay.
	fresh := []storage.UsageRecord{
		{RequestID: "at-cut", At: cut, KeyID: "k", Model: "m", Status: 200},
		{RequestID: "just-before", At: cut.Add(-time.Millisecond), KeyID: "k", Model: "m", Status: 200},
	}
	fresh = append(fresh, VariedUsage("new", 0, 300)...)
	insert(t, s, fresh)
	allRollups := RollupsOf(append(append([]storage.UsageRecord{}, old...), fresh...))
	EqualRollups(t, "before pruning", rollups(t, s, storage.UsageQuery{}), allRollups)

	// Records only: the rollups outlive them.
	recs, rolls, err := s.PruneUsage(ctx(t), cut, time.Time{})
	if err != nil {
		t.Fatalf("PruneUsage(records): %v", err)
	}
	if recs != int64(len(old))+1 || rolls != 0 {
		t.Errorf("PruneUsage(records) = %d, %d; want %d, 0", recs, rolls, len(old)+1)
	}
	if n := count(t, s); n != int64(len(fresh))-1 {
		t.Errorf("CountUsage after pruning = %d, want %d", n, len(fresh)-1)
	}
	EqualRollups(t, "after pruning records", rollups(t, s, storage.UsageQuery{}), allRollups)

	// Rollups: the rows of hours before the cut-off go; the 23:00 row of
	// "just-before" too, the 00:00 row of "at-cut" stays.
	recs, rolls, err = s.PruneUsage(ctx(t), time.Time{}, cut)
	if err != nil {
		t.Fatalf("PruneUsage(rollups): %v", err)
	}
	wantKept := filterRollups(allRollups, storage.UsageQuery{From: cut})
	if recs != 0 || rolls != int64(len(allRollups)-len(wantKept)) {
		t.Errorf("PruneUsage(rollups) = %d, %d; want 0, %d", recs, rolls, len(allRollups)-len(wantKept))
	}
	EqualRollups(t, "after pruning rollups", rollups(t, s, storage.UsageQuery{}), wantKept)

	// Nothing left to prune; a zero time prunes nothing.
	if recs, rolls, err := s.PruneUsage(ctx(t), cut, cut); err != nil || recs != 0 || rolls != 0 {
		t.Errorf("second PruneUsage = %d, %d, %v; want 0, 0", recs, rolls, err)
	}
	if recs, rolls, err := s.PruneUsage(ctx(t), time.Time{}, time.Time{}); err != nil || recs != 0 || rolls != 0 {
		t.Errorf("PruneUsage(zero times) = %d, %d, %v; want 0, 0", recs, rolls, err)
	}
	// Everything.
	future := time.Now().AddDate(10, 0, 0)
	recs, rolls, err = s.PruneUsage(ctx(t), future, future)
	if err != nil || recs != int64(len(fresh))-1 || rolls != int64(len(wantKept)) {
		t.Errorf("PruneUsage(everything) = %d, %d, %v; want %d, %d", recs, rolls, err, len(fresh)-1, len(wantKept))
	}
	if n := count(t, s); n != 0 {
		t.Errorf("CountUsage after pruning everything = %d", n)
	}
	// A pruned request id may be recorded again (it is not remembered).
	insert(t, s, old[:1])
	if n := count(t, s); n != 1 {
		t.Errorf("CountUsage after re-inserting a pruned record = %d, want 1", n)
	}
}

// testUsageDirtyText checks that records whose text is not valid UTF-8 or
// holds NUL bytes (a client can send any model name) are stored, with U+FFFD
// in place of the bad bytes, rather than failing the batch: a batch that
// cannot be written would be retried forever, and lost.
func testUsageDirtyText(t *testing.T, s storage.Store) {
	recs := SampleUsage("dirty", 3)
	recs[1].Model = "gpt\x00-5\xff"
	recs[1].ErrorClass = "bad\xc3"
	recs[2].KeyID = "key\x00"
	insert(t, s, recs)
	if n := count(t, s); n != 3 {
		t.Fatalf("CountUsage = %d, want 3", n)
	}
	clean := slices.Clone(recs)
	clean[1].Model = "gpt\uFFFD-5\uFFFD"
	clean[2].KeyID = "key\uFFFD"
	EqualRollups(t, "rollups of dirty text", rollups(t, s, storage.UsageQuery{}), RollupsOf(clean))
	EqualRollups(t, "rollups by dirty model", rollups(t, s, storage.UsageQuery{Model: recs[1].Model}), RollupsOf(clean[1:2]))
}

// testUsageRollupsCost checks that a rollup row's Cost is the sum, in
// micro-units, of the Cost of the records of its group that InsertUsage
// stored: of a user charged or of none, a retried batch not counted twice,
// a cost out of range counted as Bound clamps it; and that pruning the
// records leaves it, as it leaves the rollups' other sums.
func testUsageRollupsCost(t *testing.T, s storage.Store) {
	u := mustUser(t, s, "payer", 1_000_000_000)
	hour := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	rec := func(id string, minute, status int, cost int64, user string) storage.UsageRecord {
		return storage.UsageRecord{RequestID: id, At: hour.Add(time.Duration(minute) * time.Minute), KeyID: "k", AccountID: "a", Model: "m",
			Status: status, InputTokens: 10, Cost: cost, UserID: user}
	}
	recs := []storage.UsageRecord{
		rec("c-1", 1, 200, 1_234_567, u.ID),
		rec("c-2", 2, 200, 3, u.ID),
		rec("c-3", 3, 200, 40_000, ""),           // no user: counted, charged to nobody
		rec("c-4", 4, 500, 0, u.ID),              // failed: nothing charged
		rec("c-5", 65, 200, 999_999_999_999, ""), // next hour
		rec("c-6", 66, 200, -5, u.ID),            // clamped to 0
	}
	insert(t, s, recs[:3])
	insert(t, s, recs) // the first three again: skipped
	want := []int64{1_274_570, 0, 999_999_999_999}
	got := rollups(t, s, storage.UsageQuery{})
	if len(got) != len(want) {
		t.Fatalf("rollups: %+v; want %d rows", got, len(want))
	}
	for i, w := range want {
		if got[i].Cost != w {
			t.Errorf("rollup %d (%v, status %d): cost %d micro-units, want %d", i, got[i].Hour, got[i].Status, got[i].Cost, w)
		}
	}
	EqualRollups(t, "rollups with costs", got, RollupsOf(recs))

	// A cost beyond MaxAmount counts as MaxAmount: the sums cannot overflow.
	insert(t, s, []storage.UsageRecord{rec("c-7", 70, 200, storage.MaxAmount+1, "")})
	if got := rollups(t, s, storage.UsageQuery{From: hour.Add(time.Hour)}); len(got) != 1 || got[0].Cost != 999_999_999_999+storage.MaxAmount {
		t.Errorf("rollup of a cost beyond MaxAmount: %+v, want cost %d", got, 999_999_999_999+storage.MaxAmount)
	}

	// Pruning records leaves the rollups' cost.
	before := rollups(t, s, storage.UsageQuery{})
	if _, _, err := s.PruneUsage(ctx(t), hour.Add(24*time.Hour), time.Time{}); err != nil {
		t.Fatalf("PruneUsage: %v", err)
	}
	EqualRollups(t, "rollups after pruning their records", rollups(t, s, storage.UsageQuery{}), before)
}
