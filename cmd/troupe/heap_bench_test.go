package main

import (
	"context"
	"flag"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"
)

// heapProfile is where BenchmarkServeHeapPerAccount writes the in-use heap
// profile of its larger gateway, taken where its live heap is read (with
// -test.memprofilerate 1 for every allocation); "": none.
var heapProfile = flag.String("heapprofile", "", "BenchmarkServeHeapPerAccount: write the larger gateway's in-use heap profile to this file")

// serveHeap provisions the peers scenario with n accounts into a fresh
// data directory, as troupe bench does for its gateway (writeBenchConfig,
// provisionBench; the accounts point at a mock on 127.0.0.1:19550 that
// need not run), starts the gateway in process as troupe serve does
// (startApp), and returns the live heap it added: HeapAlloc after a
// collection, less HeapAlloc after a collection before the start. The app
// is shut down before serveHeap returns.
func serveHeap(tb testing.TB, n int, profile string) uint64 {
	tb.Helper()
	s, _, err := loadScenario("peers")
	if err != nil {
		tb.Fatal(err)
	}
	s.Accounts = n
	if err := s.Validate(); err != nil {
		tb.Fatal(err)
	}
	tmp := tb.TempDir()
	confPath, err := writeBenchConfig(tmp, "127.0.0.1:0", s)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := provisionBench(ctx, confPath, s, "127.0.0.1:19550", &benchEnv{}); err != nil {
		tb.Fatal(err)
	}
	cfg, err := loadConfig(confPath, func() []string { return nil })
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Log.Level = "error"
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC() // the pools' victim caches too
	runtime.ReadMemStats(&before)
	a, err := startApp(ctx, cfg, quietLogger())
	if err != nil {
		tb.Fatal(err)
	}
	// startApp puts the accounts to the pool actor and returns: the pool
	// has spawned them all when it answers Accounts, and their first
	// views, sent at spawn, reach the scheduler before a later message.
	if ids, err := a.sys.Accounts(ctx); err != nil || len(ids) != n {
		tb.Fatalf("%d accounts in the pool (%v), want %d", len(ids), err, n)
	}
	for {
		st, err := a.sys.PolicyStatus(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		if st.Rescoring == 0 {
			break
		}
	}
	if st, err := a.sys.SchedulerStats(ctx); err != nil || st.Accounts != n {
		tb.Fatalf("%d accounts in the scheduler (%v), want %d", st.Accounts, err, n)
	}
	runtime.GC()
	runtime.GC() // the first one's finalizers and sweeps done
	runtime.ReadMemStats(&after)
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			tb.Fatal(err)
		}
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	runtime.KeepAlive(a)
	if err := a.shutdown(30 * time.Second); err != nil {
		tb.Logf("shutdown: %v", err)
	}
	return after.HeapAlloc - before.HeapAlloc
}

// BenchmarkServeHeapPerAccount reports the live heap of a gateway started
// as troupe serve is for `troupe bench --scenario peers` (10,000 OpenAI
// accounts, the smart policy; scenario.Scenario's fleet), idle, after a
// collection: live-MB is the whole heap the app holds (what it adds to the
// test binary's), live-B/account that less the heap of the same app with
// one account, divided by the other accounts, i.e. what an account costs
// beside the gateway's fixed heap (zxcvbn's dictionaries, the policy VMs).
// Run it with -benchtime 1x: each iteration provisions and starts two
// gateways. -heapprofile FILE writes the larger one's in-use heap profile.
func BenchmarkServeHeapPerAccount(b *testing.B) {
	const n = 10000
	for b.Loop() {
		b.StopTimer()
		fixed := serveHeap(b, 1, "")
		whole := serveHeap(b, n, *heapProfile)
		b.ReportMetric(float64(whole)/1e6, "live-MB")
		b.ReportMetric(float64(fixed)/1e6, "fixed-MB")
		b.ReportMetric((float64(whole)-float64(fixed))/(n-1), "live-B/account")
		b.StartTimer()
	}
}
