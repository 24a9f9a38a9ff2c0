package fallback

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// Batch hands whole batches down and runs them through the flaky primary's
// own calls, so that a primary that is down fails every op of a batch, as a
// failed pipeline does.
func (f *flaky) Batch(ctx context.Context, ops []storage.CacheOp) error {
	return storage.RunOps(ctx, f, ops)
}

// A batch is mirrored like the calls it holds while the primary serves
// (skipped limit checks wrote nothing), runs locally while it does not
// (its entry writes journalled), and those writes reach the primary when
// it is back.
func TestBatchAcrossOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Options{})
		c, ctx := h.c, t.Context()
		request := func(session string) []storage.CacheOp {
			return []storage.CacheOp{
				{Kind: storage.CacheIncr, Key: "rpm", N: 1, TTL: time.Hour, Limit: 2},
				{Kind: storage.CacheIncr, Key: "rpd", N: 1, TTL: time.Hour, Limit: 100},
				{Kind: storage.CacheSet, Key: "session", Value: session, TTL: time.Hour},
			}
		}
		for range 3 {
			must(t, c.Batch(ctx, request("acct-1")))
		}
		if n, _ := h.local.Count(ctx, "rpm", time.Hour); n != 3 {
			t.Fatalf("local rpm mirror %d, want 3", n)
		}
		if n, _ := h.local.Count(ctx, "rpd", time.Hour); n != 2 {
			t.Fatalf("local rpd mirror %d, want 2 (the refused request's check was skipped)", n)
		}
		if v, ok, _ := h.local.Get(ctx, "session"); !ok || v != "acct-1" {
			t.Fatal("a batch's Set was not mirrored locally")
		}

		h.primary.down.Store(true)
		ops := request("acct-2")
		if err := c.Batch(ctx, ops); err != nil {
			t.Fatalf("batch during the outage: %v", err)
		}
		h.wantChange(t, true)
		if !ops[0].Over || ops[0].Total != 4 || !ops[1].Skipped {
			t.Fatalf("degraded batch: %+v; want rpm over at 4 (continuing the mirror), rpd skipped", ops)
		}
		if st := c.Stats(); st.Pending != 1 {
			t.Fatalf("%d pending writes, want the batch's Set", st.Pending)
		}

		h.primary.down.Store(false)
		h.wantChange(t, false)
		waitFor(t, 3*time.Second, "outage writes copied", func() bool { return c.Stats().Pending == 0 })
		if v, ok, _ := h.primary.Cache.Get(ctx, "session"); !ok || v != "acct-2" {
			t.Fatalf("the outage batch's Set was not copied to the primary: %q %v", v, ok)
		}
	})
}
