package storagetest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// testAPIKeyWeight: a key's fair-queue weight defaults to 1, round-trips
// through create, update and lookups, and a negative one is refused.
func testAPIKeyWeight(t *testing.T, s storage.Store) {
	k := SampleAPIKey("weighted")
	k.Weight = 0
	got := mustCreateKey(t, s, k)
	if got.Weight != 1 {
		t.Errorf("created with weight 0: Weight = %d, want the default 1", got.Weight)
	}
	got.Weight = 5
	up, err := s.UpdateAPIKey(ctx(t), got)
	if err != nil {
		t.Fatal(err)
	}
	if up.Weight != 5 {
		t.Errorf("updated: Weight = %d, want 5", up.Weight)
	}
	byHash, err := s.APIKeyByHash(ctx(t), k.Hash)
	if err != nil || byHash.Weight != 5 {
		t.Errorf("APIKeyByHash: Weight = %d, %v; want 5", byHash.Weight, err)
	}
	heavy := SampleAPIKey("heavy")
	heavy.Weight = 3
	if got := mustCreateKey(t, s, heavy); got.Weight != 3 {
		t.Errorf("created with weight 3: Weight = %d", got.Weight)
	}
	bad := SampleAPIKey("negative")
	bad.Weight = -1
	if _, err := s.CreateAPIKey(ctx(t), bad); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("create with weight -1: err = %v, want ErrInvalid", err)
	}
	up.Weight = -2
	if _, err := s.UpdateAPIKey(ctx(t), up); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("update to weight -2: err = %v, want ErrInvalid", err)
	}
	if k, _ := s.APIKeyByHash(ctx(t), k.Hash); k.Weight != 5 {
		t.Errorf("after a refused update: Weight = %d, want 5", k.Weight)
	}
}

// testRequestLogDecisions: the decision trace and the estimated mark are
// stored with the record and read back with the rest of it, by both
// UsageRecords and ListUsageRecords.
func testRequestLogDecisions(t *testing.T, s storage.Store) {
	recs := SampleUsage("dec", 3)
	recs[0].Decision = "p=smart@3 n=120 f=tags:fast top=acct-1:98.5h,acct-2:97w chose=acct-1"
	recs[1].Decision = "p=canary:smart@4 n=1 chose=acct-1 via=prefer"
	recs[1].Estimated = true
	if err := s.InsertUsage(ctx(t), recs); err != nil {
		t.Fatal(err)
	}
	got, err := s.UsageRecords(ctx(t), storage.RequestLogQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("UsageRecords: %d records, want 3", len(got))
	}
	for i, r := range got {
		w := recs[i]
		if r.RequestID != w.RequestID || r.Decision != w.Decision || !r.At.Equal(w.At) ||
			r.KeyID != w.KeyID || r.AccountID != w.AccountID || r.Model != w.Model || r.Route != w.Route ||
			r.Stream != w.Stream || r.Status != w.Status || r.Attempts != w.Attempts || r.Latency != w.Latency ||
			r.TTFT != w.TTFT || r.InputTokens != w.InputTokens || r.OutputTokens != w.OutputTokens ||
			r.CachedTokens != w.CachedTokens || r.ReasoningTokens != w.ReasoningTokens || r.Estimated != w.Estimated {
			t.Errorf("record %d:\n got %+v\nwant %+v", i, r, w)
		}
	}
	listed, err := s.ListUsageRecords(ctx(t), storage.UsageRecordQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range listed {
		if want := r.RequestID == recs[1].RequestID; r.Estimated != want {
			t.Errorf("ListUsageRecords: %s Estimated = %v, want %v", r.RequestID, r.Estimated, want)
		}
	}
}

// testRequestLogErrorEvents: failed attempts are stored once, even when the
// batch is retried or repeats an event; invalid events write nothing; pruning
// the records prunes their events.
func testRequestLogErrorEvents(t *testing.T, s storage.Store) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	evs := []storage.ErrorEvent{
		{RequestID: "ev-0", Attempt: 1, At: base.Add(10 * time.Millisecond), AccountID: "acct-9", Class: "quota", Status: 429, Latency: 9 * time.Millisecond},
		{RequestID: "ev-0", Attempt: 2, At: base.Add(30 * time.Millisecond), AccountID: "acct-8", Class: "transient", Status: 0, Latency: 20 * time.Millisecond},
		{RequestID: "ev-1", Attempt: 1, At: base.Add(6 * time.Millisecond), AccountID: "acct-7", Class: "transient", Status: 503, Latency: 4 * time.Millisecond},
	}
	batch := append(append([]storage.ErrorEvent(nil), evs...), storage.ErrorEvent{RequestID: "ev-0", Attempt: 1, AccountID: "repeat"})
	for range 2 { // the second insert is a retried batch: nothing doubles
		if err := s.InsertErrorEvents(ctx(t), batch); err != nil {
			t.Fatal(err)
		}
	}
	bad := []storage.ErrorEvent{{RequestID: "ev-new", Attempt: 1, At: base}, {RequestID: "ev-new", Attempt: 0, At: base}}
	if err := s.InsertErrorEvents(ctx(t), bad); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("an event with attempt 0: err = %v, want ErrInvalid", err)
	}
	if err := s.InsertErrorEvents(ctx(t), []storage.ErrorEvent{{Attempt: 1}}); !errors.Is(err, storage.ErrInvalid) {
		t.Errorf("an event without request id: err = %v, want ErrInvalid", err)
	}
	got, err := s.ErrorEvents(ctx(t), storage.RequestLogQuery{})
	if err != nil {
		t.Fatal(err)
	}
	want := []storage.ErrorEvent{evs[2], evs[0], evs[1]} // by At
	if len(got) != len(want) {
		t.Fatalf("ErrorEvents: %d events, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.RequestID != w.RequestID || g.Attempt != w.Attempt || !g.At.Equal(w.At) || g.AccountID != w.AccountID ||
			g.Class != w.Class || g.Status != w.Status || g.Latency != w.Latency {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
	if _, _, err := s.PruneUsage(ctx(t), base.Add(time.Hour), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ErrorEvents(ctx(t), storage.RequestLogQuery{}); err != nil || len(got) != 0 {
		t.Errorf("after pruning: %d events, %v; want none", len(got), err)
	}
}

// testRequestLogWindow: queries select by time window, oldest first, and honour the limit.
func testRequestLogWindow(t *testing.T, s storage.Store) {
	recs := SampleUsage("win", 50)
	var evs []storage.ErrorEvent
	for i := range recs {
		recs[i].At = recs[i].At.Add(time.Duration(i) * time.Second)
		evs = append(evs, storage.ErrorEvent{RequestID: recs[i].RequestID, Attempt: 1, At: recs[i].At, AccountID: fmt.Sprint("a", i), Class: "rate", Status: 429})
	}
	if err := s.InsertUsage(ctx(t), recs); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertErrorEvents(ctx(t), evs); err != nil {
		t.Fatal(err)
	}
	q := storage.RequestLogQuery{From: recs[10].At, To: recs[20].At}
	got, err := s.UsageRecords(ctx(t), q)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 10 || got[0].RequestID != recs[10].RequestID || got[9].RequestID != recs[19].RequestID {
		t.Errorf("window [10, 20): %d records, first %q", len(got), first(got))
	}
	evs, err = s.ErrorEvents(ctx(t), q)
	if err != nil || len(evs) != 10 || evs[0].RequestID != recs[10].RequestID {
		t.Errorf("events in window [10, 20): %d, %v", len(evs), err)
	}
	q.Limit = 4
	if got, err := s.UsageRecords(ctx(t), q); err != nil || len(got) != 4 || got[3].RequestID != recs[13].RequestID {
		t.Errorf("limit 4: %d records, %v", len(got), err)
	}
	if got, err := s.ErrorEvents(ctx(t), q); err != nil || len(got) != 4 {
		t.Errorf("events, limit 4: %d, %v", len(got), err)
	}
	if got, err := s.UsageRecords(ctx(t), storage.RequestLogQuery{From: recs[49].At.Add(time.Second)}); err != nil || len(got) != 0 {
		t.Errorf("after the last record: %d records, %v", len(got), err)
	}
}

func first(recs []storage.UsageRecord) string {
	if len(recs) == 0 {
		return ""
	}
	return recs[0].RequestID
}

// testRequestLogSeries: UsageSeries sums the records and error events of
// its window per bucket (empty buckets included), bins latencies as
// storage.LatencyBin does, and refuses a bad query.
func testRequestLogSeries(t *testing.T, s storage.Store) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	recs := SampleUsage("ser", 6)
	recs[0].At, recs[0].Latency = base, 100*time.Millisecond
	recs[1].At, recs[1].Latency = base.Add(20*time.Second), 200*time.Millisecond
	recs[2].At, recs[2].Latency, recs[2].Status, recs[2].ErrorClass, recs[2].Attempts = base.Add(59999*time.Millisecond), 5*time.Second, 502, "transient", 3
	recs[3].At, recs[3].Latency, recs[3].Attempts = base.Add(2*time.Minute), time.Second, 2
	recs[4].At = base.Add(-time.Millisecond) // before the window
	recs[5].At = base.Add(3 * time.Minute)   // at its end: outside
	// Bucket 1 holds a record at every latency bin's bound and just under it,
	// so the SQL binning is checked against LatencyBin.
	var want storage.LatencyHistogram
	for i, ub := range storage.LatencyBinUpper {
		for j, us := range []int64{ub - 1, ub} {
			r := SampleUsage(fmt.Sprintf("bin-%d-%d", i, j), 1)[0]
			r.At, r.Latency = base.Add(time.Minute+time.Duration(i)*time.Millisecond), time.Duration(us)*time.Microsecond
			want.Add(r.Latency)
			recs = append(recs, r)
		}
	}
	if err := s.InsertUsage(ctx(t), recs); err != nil {
		t.Fatal(err)
	}
	evs := []storage.ErrorEvent{
		{RequestID: "ser-2", Attempt: 1, At: base.Add(time.Second), Class: "transient", Status: 502},
		{RequestID: "ser-2", Attempt: 2, At: base.Add(2 * time.Second), Class: "rate", Status: 429},
		{RequestID: "ser-2", Attempt: 3, At: base.Add(3 * time.Second), Class: "transient", Status: 503},
		{RequestID: "ser-3", Attempt: 1, At: base.Add(2*time.Minute + time.Second), Class: "quota", Status: 429},
		{RequestID: "ser-5", Attempt: 1, At: base.Add(3 * time.Minute), Class: "auth", Status: 401}, // outside
	}
	if err := s.InsertErrorEvents(ctx(t), evs); err != nil {
		t.Fatal(err)
	}
	q := storage.SeriesQuery{From: base, To: base.Add(3 * time.Minute), Step: time.Minute}
	got, err := s.UsageSeries(ctx(t), q)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d buckets, want 3", len(got))
	}
	for i, b := range got {
		if !b.Start.Equal(base.Add(time.Duration(i) * time.Minute)) {
			t.Errorf("bucket %d starts at %s", i, b.Start)
		}
	}
	b0 := got[0]
	if b0.Requests != 3 || b0.Failed != 1 || b0.Failovers != 2 || b0.InputTokens != 3600 || b0.CachedTokens != 3000 || b0.OutputTokens != 900 {
		t.Errorf("bucket 0: %+v", b0)
	}
	if b0.Errors["transient"] != 2 || b0.Errors["rate"] != 1 || len(b0.Errors) != 2 {
		t.Errorf("bucket 0 errors: %v", b0.Errors)
	}
	var h0 storage.LatencyHistogram
	for _, d := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 5 * time.Second} {
		h0.Add(d)
	}
	if b0.Latency != h0 {
		t.Errorf("bucket 0 latencies: %v, want %v", b0.Latency, h0)
	}
	if got[1].Latency != want || got[1].Requests != int64(2*len(storage.LatencyBinUpper)) || got[1].Errors != nil {
		t.Errorf("bucket 1: %d requests, errors %v, latencies\n got %v\nwant %v", got[1].Requests, got[1].Errors, got[1].Latency, want)
	}
	// The SQL sums what SeriesOf sums in memory.
	all, err := s.UsageRecords(ctx(t), storage.RequestLogQuery{Limit: storage.MaxRequestLogLimit})
	if err != nil {
		t.Fatal(err)
	}
	allEvs, err := s.ErrorEvents(ctx(t), storage.RequestLogQuery{Limit: storage.MaxRequestLogLimit})
	if err != nil {
		t.Fatal(err)
	}
	if mem := storage.SeriesOf(q, all, allEvs); !reflect.DeepEqual(mem, got) {
		t.Errorf("UsageSeries differs from SeriesOf over the same log:\n got %+v\nwant %+v", got, mem)
	}
	if b2 := got[2]; b2.Requests != 1 || b2.Failovers != 1 || b2.Failed != 0 || b2.Errors["quota"] != 1 || b2.Latency.Count() != 1 {
		t.Errorf("bucket 2: %+v", b2)
	}
	// A window with nothing in it still has its buckets.
	empty, err := s.UsageSeries(ctx(t), storage.SeriesQuery{From: base.Add(time.Hour), To: base.Add(2 * time.Hour), Step: 10 * time.Minute})
	if err != nil || len(empty) != 6 || empty[5].Requests != 0 {
		t.Errorf("an empty window: %d buckets, %v", len(empty), err)
	}
	for _, bad := range []storage.SeriesQuery{
		{From: base, To: base, Step: time.Minute},
		{From: base, To: base.Add(time.Hour), Step: 0},
		{From: base, To: base.Add(time.Hour), Step: 1500 * time.Millisecond},
		{From: base, To: base.Add(48 * time.Hour), Step: time.Minute},
	} {
		if _, err := s.UsageSeries(ctx(t), bad); !errors.Is(err, storage.ErrInvalid) {
			t.Errorf("UsageSeries(%+v): err = %v, want ErrInvalid", bad, err)
		}
	}
}
