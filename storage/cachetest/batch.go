package cachetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// This file is the suite's part for storage.Batcher.

// mustBatch runs ops on c as one batch, which c must support.
func mustBatch(t *testing.T, c storage.Cache, ops []storage.CacheOp) {
	t.Helper()
	b, ok := c.(storage.Batcher)
	if !ok {
		t.Fatalf("%T is not a storage.Batcher", c)
	}
	if err := b.Batch(t.Context(), ops); err != nil {
		t.Fatalf("Batch: %v", err)
	}
}

// A batch does what the same calls one at a time do, and its entries and
// counters are the ones those calls see.
func testBatchMixed(t *testing.T, c storage.Cache) {
	mustSet(t, c, "a", "1", long)
	mustIncr(t, c, "n", 5, long)
	ops := []storage.CacheOp{
		{Kind: storage.CacheGet, Key: "a"},
		{Kind: storage.CacheGet, Key: "missing"},
		{Kind: storage.CacheSet, Key: "b", Value: "2", TTL: long},
		{Kind: storage.CacheIncr, Key: "n", N: 2, TTL: long},
		{Kind: storage.CacheCount, Key: "n", TTL: long},
		{Kind: storage.CacheCount, Key: "other", TTL: long},
		{Kind: storage.CacheIncr, Key: "m", N: -3, TTL: long},
	}
	mustBatch(t, c, ops)
	if op := ops[0]; !op.Found || op.Value != "1" {
		t.Errorf("Get a: %q %v", op.Value, op.Found)
	}
	if op := ops[1]; op.Found || op.Value != "" {
		t.Errorf("Get missing: %q %v", op.Value, op.Found)
	}
	if got := []int64{ops[3].Total, ops[4].Total, ops[5].Total, ops[6].Total}; got[0] != 7 || got[1] != 7 || got[2] != 0 || got[3] != 0 {
		t.Errorf("counter totals %v, want [7 7 0 0]", got)
	}
	for i, op := range ops {
		if op.Over || op.Skipped || op.Err != nil {
			t.Errorf("op %d: over %v skipped %v err %v", i, op.Over, op.Skipped, op.Err)
		}
	}
	wantValue(t, c, "b", "2")
	if got := mustCount(t, c, "n", long); got != 7 {
		t.Fatalf("Count after the batch = %d, want 7", got)
	}
	// A batch runs again with fresh results.
	mustBatch(t, c, ops)
	if ops[3].Total != 9 || !ops[0].Found {
		t.Fatalf("second run: total %d, found %v", ops[3].Total, ops[0].Found)
	}
}

// limitOps are one request's limit checks: RPM and RPD charged, then the
// token budget checked, and an entry read.
func limitOps(rpm, rpd, tokens int64) []storage.CacheOp {
	return []storage.CacheOp{
		{Kind: storage.CacheIncr, Key: "rpm", N: 1, TTL: long, Limit: rpm},
		{Kind: storage.CacheIncr, Key: "rpd", N: 1, TTL: long, Limit: rpd},
		{Kind: storage.CacheCount, Key: "tpd", TTL: long, Limit: tokens},
		{Kind: storage.CacheGet, Key: "affinity"},
	}
}

// Limit checks are a chain: the first that refuses stops the later ones
// (a request refused per minute is not charged to the day), while ops
// without a limit still run.
func testBatchLimitChain(t *testing.T, c storage.Cache) {
	mustSet(t, c, "affinity", "acct", long)
	for i := range 2 {
		ops := limitOps(2, 100, 1000)
		mustBatch(t, c, ops)
		if ops[0].Over || ops[1].Over || ops[2].Over || ops[1].Skipped || ops[0].Total != int64(i+1) || ops[1].Total != int64(i+1) {
			t.Fatalf("request %d refused: %+v", i, ops)
		}
	}
	ops := limitOps(2, 100, 1000)
	mustBatch(t, c, ops)
	if !ops[0].Over || ops[0].Total != 3 {
		t.Fatalf("third request in the minute: rpm %+v, want over at 3", ops[0])
	}
	if !ops[1].Skipped || !ops[2].Skipped || ops[1].Over || ops[1].Total != 0 {
		t.Fatalf("checks after the refusal: %+v %+v, want skipped", ops[1], ops[2])
	}
	if !ops[3].Found || ops[3].Value != "acct" {
		t.Fatalf("the entry read after a refusal: %+v", ops[3])
	}
	if got := mustCount(t, c, "rpd", long); got != 2 {
		t.Fatalf("requests per day = %d after a refused third request; want 2 (not charged)", got)
	}
	if got := mustCount(t, c, "rpm", long); got != 3 {
		t.Fatalf("requests per minute = %d; want 3 (a refused request still counts in its window)", got)
	}

	// A budget that is used up refuses at its count; nothing after it runs.
	mustIncr(t, c, "tpd2", 50, long)
	ops = []storage.CacheOp{
		{Kind: storage.CacheCount, Key: "tpd2", TTL: long, Limit: 50},
		{Kind: storage.CacheIncr, Key: "after", N: 1, TTL: long, Limit: 10},
		{Kind: storage.CacheIncr, Key: "unlimited", N: 1, TTL: long},
	}
	mustBatch(t, c, ops)
	if !ops[0].Over || ops[0].Total != 50 || !ops[1].Skipped || ops[2].Skipped || ops[2].Total != 1 {
		t.Fatalf("budget chain: %+v", ops)
	}
	if got := mustCount(t, c, "after", long); got != 0 {
		t.Fatalf("a skipped increment counted %d", got)
	}
}

// Concurrent batches admit exactly as many requests as the limit, and
// charge the day only for those the minute admitted.
func testBatchLimitConcurrent(t *testing.T, c storage.Cache) {
	const workers, per, rpm = 8, 25, 60
	var (
		mu       sync.Mutex
		admitted int
		wg       sync.WaitGroup
	)
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range per {
				ops := limitOps(rpm, 1<<40, 1<<40)
				if err := c.(storage.Batcher).Batch(t.Context(), ops); err != nil {
					errs <- err
					return
				}
				if !ops[0].Over && !ops[1].Over && !ops[2].Over {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if admitted != rpm {
		t.Fatalf("%d of %d requests admitted with a limit of %d", admitted, workers*per, rpm)
	}
	if got := mustCount(t, c, "rpd", long); got != rpm {
		t.Fatalf("requests per day = %d; want %d, the admitted ones", got, rpm)
	}
}

// An op with a ttl or window that is not positive, or of no known kind,
// fails alone; the others run.
func testBatchInvalid(t *testing.T, c storage.Cache) {
	ops := []storage.CacheOp{
		{Kind: storage.CacheSet, Key: "a", Value: "1", TTL: 0},
		{Kind: storage.CacheIncr, Key: "n", N: 1, TTL: -time.Second},
		{Kind: storage.CacheCount, Key: "n", TTL: 0, Limit: 1},
		{Kind: 0, Key: "x"},
		{Kind: storage.CacheSet, Key: "b", Value: "2", TTL: long},
		{Kind: storage.CacheIncr, Key: "n", N: 1, TTL: long, Limit: 5},
	}
	err := c.(storage.Batcher).Batch(t.Context(), ops)
	if !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("Batch error %v, want one wrapping storage.ErrInvalid", err)
	}
	for i := range 4 {
		wantInvalid(t, "batch op "+string(rune('0'+i)), ops[i].Err)
		if ops[i].Over {
			t.Errorf("op %d: a failed check refused", i)
		}
	}
	if ops[4].Err != nil || ops[5].Err != nil || ops[5].Total != 1 || ops[5].Skipped {
		t.Fatalf("valid ops beside invalid ones: %+v %+v", ops[4], ops[5])
	}
	wantValue(t, c, "b", "2")
	wantAbsent(t, c, "a")
}

// A guard whose counter is absent skips every later counter op of the
// batch, limit or not, and lets the entry ops run; one whose counter is
// there lets them all run, and is never over.
func testBatchGuard(t *testing.T, c storage.Cache) {
	guarded := func() []storage.CacheOp {
		return []storage.CacheOp{
			{Kind: storage.CacheGuard, Key: "marker", TTL: long, Limit: 1},
			{Kind: storage.CacheIncr, Key: "held", N: -5, TTL: long},
			{Kind: storage.CacheIncr, Key: "slots", N: 1, TTL: long, Limit: 10},
			{Kind: storage.CacheCount, Key: "held", TTL: long},
			{Kind: storage.CacheSet, Key: "e", Value: "1", TTL: long},
		}
	}
	mustIncr(t, c, "held", 7, long)
	ops := guarded()
	mustBatch(t, c, ops)
	if ops[0].Total != 0 || ops[0].Skipped || ops[0].Over {
		t.Fatalf("guard of an absent counter: %+v", ops[0])
	}
	for i := 1; i < 4; i++ {
		if !ops[i].Skipped || ops[i].Total != 0 || ops[i].Over {
			t.Errorf("op %d after a guard of an absent counter: %+v, want skipped", i, ops[i])
		}
	}
	if got := mustCount(t, c, "held", long); got != 7 {
		t.Fatalf("a guarded increment ran: held %d, want 7", got)
	}
	if got := mustCount(t, c, "slots", long); got != 0 {
		t.Fatalf("a guarded limit check ran: slots %d, want 0", got)
	}
	wantValue(t, c, "e", "1")

	mustIncr(t, c, "marker", 1, long)
	ops = guarded()
	mustBatch(t, c, ops)
	if ops[0].Total != 1 || ops[0].Over || ops[0].Skipped {
		t.Fatalf("guard of a present counter: %+v", ops[0])
	}
	if ops[1].Skipped || ops[1].Total != 2 || ops[2].Skipped || ops[2].Total != 1 || ops[3].Total != 2 {
		t.Fatalf("ops after a guard of a present counter: %+v", ops[1:4])
	}
}
