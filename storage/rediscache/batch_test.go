package rediscache

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
)

// roundTrips counts what a go-redis client sends: single commands and
// pipelines, one round trip each.
type roundTrips struct{ commands, pipelines atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.commands.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.pipelines.Add(1)
		return next(ctx, cmds)
	}
}

func requestOps() []storage.CacheOp {
	return []storage.CacheOp{
		{Kind: storage.CacheIncr, Key: "rpm", N: 1, TTL: time.Minute, Limit: 10},
		{Kind: storage.CacheIncr, Key: "rpd", N: 1, TTL: 24 * time.Hour, Limit: 100},
		{Kind: storage.CacheCount, Key: "tpd", TTL: 24 * time.Hour, Limit: 1000},
		{Kind: storage.CacheGet, Key: "aff:sess:x"},
		{Kind: storage.CacheSet, Key: "aff:resp:y", Value: "acct|key", TTL: time.Hour},
	}
}

// A batch is one pipeline, whatever it holds.
func TestBatchIsOneRoundTrip(t *testing.T) {
	c, _ := open(t, Options{PoolSize: 1})
	rt := &roundTrips{}
	c.rdb.AddHook(rt)
	if err := c.Batch(t.Context(), requestOps()); err != nil { // dials (HELLO) and loads the script
		t.Fatal(err)
	}
	rt.commands.Store(0)
	rt.pipelines.Store(0)
	ops := requestOps()
	if err := c.Batch(t.Context(), ops); err != nil {
		t.Fatal(err)
	}
	if rt.pipelines.Load() != 1 || rt.commands.Load() != 0 {
		t.Fatalf("a batch of %d ops made %d pipelines and %d commands; want 1 and 0", len(ops), rt.pipelines.Load(), rt.commands.Load())
	}
	if ops[0].Total != 2 || ops[1].Total != 2 || ops[2].Total != 0 || ops[3].Found {
		t.Fatalf("results %+v", ops)
	}
}

// After Redis lost its script cache (a restart, SCRIPT FLUSH), a batch
// still runs its counters once: NOSCRIPT means the script did not run, so
// it is sent again, once. A private server: the flush must not disturb
// other tests.
func TestBatchAfterScriptFlush(t *testing.T) {
	srv := cachetest.StartRedis(t)
	c, err := New(t.Context(), srv.URL(), Options{Prefix: "flush:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for i := range 3 {
		if err := srv.Client().ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		ops := requestOps()
		if err := c.Batch(t.Context(), ops); err != nil {
			t.Fatalf("batch %d after SCRIPT FLUSH: %v", i, err)
		}
		if ops[0].Total != int64(i+1) || ops[1].Total != int64(i+1) {
			t.Fatalf("batch %d: totals %d %d, want %d (counted once)", i, ops[0].Total, ops[1].Total, i+1)
		}
	}
}

// With Redis unreachable every op fails with ErrCacheUnavailable, and no
// limit check refuses.
func TestBatchUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, err := New(t.Context(), "redis://"+addr+"/0", Options{Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ops := requestOps()
	if err := c.Batch(t.Context(), ops); !errors.Is(err, storage.ErrCacheUnavailable) {
		t.Fatalf("Batch = %v, want ErrCacheUnavailable", err)
	}
	for i, op := range ops {
		if !errors.Is(op.Err, storage.ErrCacheUnavailable) || op.Over || op.Skipped {
			t.Errorf("op %d: err %v over %v skipped %v", i, op.Err, op.Over, op.Skipped)
		}
	}
}
