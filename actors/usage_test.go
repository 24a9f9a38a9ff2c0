package actors

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/troupe-gw/troupe/internal/cputime"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/postgres"
	"github.com/troupe-gw/troupe/storage/sqlite"
	"github.com/troupe-gw/troupe/storage/storagetest"
	"github.com/troupe-gw/troupe/upstream"
)

// durabilityRecords is how many records TestUsageDurability pushes through
// the recorder: 100,000, or 10,000 under the race detector, which slows the
// transpiled SQLite engine down about 30 times (run `go test -run
// TestUsageDurability ./actors` for the full count).
func durabilityRecords() int {
	if raceEnabled {
		return 10_000
	}
	return 100_000
}

func testSealer(t testing.TB) *storage.Sealer {
	t.Helper()
	key := make([]byte, storage.KeySize)
	rand.Read(key)
	s, err := storage.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ambiguous is a UsageWriter over a store that fails some batches the
// recorder must retry: every 13th call fails before writing anything (a
// refused connection) and every 17th fails after its transaction committed
// (a timeout during COMMIT), so the retry finds its records already stored.
type ambiguous struct {
	storage.Usage
	calls, failed atomic.Int64
}

var errInjected = errors.New("injected storage failure")

func (a *ambiguous) InsertUsage(ctx context.Context, recs []storage.UsageRecord) error {
	n := a.calls.Add(1)
	if n%13 == 0 {
		a.failed.Add(1)
		return errInjected
	}
	if err := a.Usage.InsertUsage(ctx, recs); err != nil {
		return err
	}
	if n%17 == 0 {
		a.failed.Add(1)
		return errInjected
	}
	return nil
}

// TestUsageDurability pushes records through System.Record from 8
// goroutines at once, as a loaded gateway does, with injected write failures
// the recorder retries, then stops the system gracefully at once (no
// FlushUsage): every record must be in storage, and the hourly rollups must
// agree with them exactly. It runs on SQLite and on PostgreSQL.
func TestUsageDurability(t *testing.T) {
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
			t.Parallel()
			store := b.open(t)
			defer store.Close()
			testUsageDurability(t, store, durabilityRecords())
		})
	}
}

func testUsageDurability(t *testing.T, store storage.Store, n int) {
	w := &ambiguous{Usage: store}
	var written, lost atomic.Int64
	sys, err := Start(Config{
		Store:     w,
		Logger:    slog.New(slog.DiscardHandler),
		Transport: func(storage.Account) (upstream.Transport, error) { return nil, errors.New("no accounts in this test") },
		OnUsageWritten: func(n int, err error) {
			if err != nil {
				lost.Add(int64(n))
			} else {
				written.Add(int64(n))
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	recs := storagetest.VariedUsage("dur", 0, n)
	start := time.Now()
	const producers = 8
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := p; i < n; i += producers {
				sys.Record(recs[i])
			}
		})
	}
	wg.Wait()
	pushed := time.Since(start)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := sys.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v (records written so far: %d)", err, written.Load())
	}
	t.Logf("%d records pushed by %d goroutines in %v, all written %v after the start; %d batch writes, %d injected failures retried",
		n, producers, pushed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), w.calls.Load(), w.failed.Load())
	if lost.Load() != 0 {
		t.Errorf("the recorder gave up on %d records", lost.Load())
	}
	if w.failed.Load() == 0 {
		t.Errorf("no failure was injected: the retries were not exercised")
	}
	storagetest.CheckUsage(t, store, recs)
}

// batchLog is a UsageWriter that remembers when each batch arrived.
type batchLog struct {
	mu      sync.Mutex
	batches []int
	at      []time.Time
}

func (b *batchLog) InsertUsage(_ context.Context, recs []storage.UsageRecord) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batches = append(b.batches, len(recs))
	b.at = append(b.at, time.Now())
	return nil
}

func (b *batchLog) snapshot() ([]int, []time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]int(nil), b.batches...), append([]time.Time(nil), b.at...)
}

// TestUsageBatching checks the two flush triggers the loss bound rests on:
// a full batch is written at once, and a partial one interval after its
// first record arrived. The system runs in a synctest bubble, so the times
// are exact: synctest.Wait returns once the recorder and its writer wait.
func TestUsageBatching(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 150 * time.Millisecond
		w := &batchLog{}
		sys, err := Start(Config{
			Store: w, UsageBatch: 10, UsageInterval: interval, Logger: slog.New(slog.DiscardHandler),
			Transport: func(storage.Account) (upstream.Transport, error) { return nil, errors.New("none") },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sys.Stop(context.Background())
		recs := storagetest.VariedUsage("batch", 0, 13)

		// 10 records: a full batch, written without waiting for the interval.
		start := time.Now()
		for _, r := range recs[:10] {
			sys.Record(r)
		}
		synctest.Wait()
		b, at := w.snapshot()
		if len(b) != 1 || b[0] != 10 {
			t.Fatalf("batches %v, want one of 10 records", b)
		}
		if d := at[0].Sub(start); d != 0 {
			t.Errorf("a full batch waited %v: it should not wait for the %v interval", d, interval)
		}

		// 3 records: written together, interval after the first of them.
		first := time.Now()
		for _, r := range recs[10:] {
			sys.Record(r)
			time.Sleep(20 * time.Millisecond)
		}
		synctest.Wait()
		if b, _ := w.snapshot(); len(b) != 1 {
			t.Fatalf("batches %v: a partial batch was written before its interval", b)
		}
		time.Sleep(time.Until(first.Add(interval)))
		synctest.Wait()
		b, at = w.snapshot()
		if len(b) != 2 || b[1] != 3 {
			t.Fatalf("batches %v, want a second one of 3 records", b)
		}
		if d := at[1].Sub(first); d != interval {
			t.Errorf("a partial batch was written %v after its first record, want %v", d, interval)
		}
		time.Sleep(2 * interval)
		synctest.Wait()
		if b, _ := w.snapshot(); len(b) != 2 {
			t.Errorf("%d batches written, want 2: %v", len(b), b)
		}
	})
}

// TestUsageDeferredRecords: a record sent while the batch's timer runs
// waits in the recorder's mailbox without waking it, and is written with
// the batch at the timer's tick; the record that fills the batch wakes it.
func TestUsageDeferredRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 150 * time.Millisecond
		w := &batchLog{}
		sys, err := Start(Config{
			Store: w, UsageBatch: 4, UsageInterval: interval, Logger: slog.New(slog.DiscardHandler),
			Transport: func(storage.Account) (upstream.Transport, error) { return nil, errors.New("none") },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sys.Stop(context.Background())
		m := sys.usageBox
		waiting := func() (int, bool) {
			m.mu.Lock()
			defer m.mu.Unlock()
			return len(m.in), m.parked
		}
		recs := storagetest.VariedUsage("deferred", 0, 7)

		sys.Record(recs[0]) // the batch's first: wakes the recorder, which arms the timer
		synctest.Wait()
		sys.Record(recs[1])
		sys.Record(recs[2])
		if n, parked := waiting(); n != 2 || !parked {
			t.Fatalf("%d records queued, recorder parked %v: want 2 queued, parked", n, parked)
		}
		time.Sleep(interval)
		synctest.Wait()
		if b, _ := w.snapshot(); len(b) != 1 || b[0] != 3 {
			t.Fatalf("batches %v, want one of 3 records at the interval", b)
		}

		// A full batch: the 4th record wakes the recorder, the batch is written at once.
		for _, r := range recs[3:] {
			sys.Record(r)
			synctest.Wait()
		}
		if b, _ := w.snapshot(); len(b) != 2 || b[1] != 4 {
			t.Fatalf("batches %v, want a second one of 4 records before the interval", b)
		}
	})
}

// BenchmarkUsageRecorder measures the recorder end to end on each backend:
// b.N records pushed through System.Record (batches of 500), then a graceful
// Stop that writes them all; it reports records written per second.
func BenchmarkUsageRecorder(b *testing.B) {
	for _, backend := range []string{"sqlite", "postgres"} {
		b.Run(backend, func(b *testing.B) {
			var store storage.Store
			var err error
			if backend == "sqlite" {
				store, err = sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "troupe.db"), testSealer(b))
			} else {
				store, err = postgres.Open(b.Context(), storagetest.PostgresDB(b), testSealer(b))
			}
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			recs := storagetest.VariedUsage("bench", 0, b.N)
			sys, err := Start(Config{Store: store, Logger: slog.New(slog.DiscardHandler),
				Transport: func(storage.Account) (upstream.Transport, error) { return nil, errors.New("none") }})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range recs {
				sys.Record(recs[i])
			}
			if err := sys.Stop(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
			if n, err := store.CountUsage(context.Background()); err != nil || n != int64(b.N) {
				b.Fatalf("%d records stored, want %d (%v)", n, b.N, err)
			}
		})
	}
}

// BenchmarkUsageRecordPaced is System.Record at about 1,000 records a
// second, the rate of troupe bench's chat phases: each op sleeps 1 ms,
// then records one, into an in-memory writer. cpu-ns/op is the process's
// CPU per op (the sleep's own wake-up included, the same in any version),
// which counts the recorder's wake-ups that a back-to-back loop hides: in
// one, the recorder never parks.
//
//	go test -run '^$' -bench UsageRecordPaced -benchtime 3000x ./actors/
func BenchmarkUsageRecordPaced(b *testing.B) {
	sys, err := Start(Config{Store: &batchLog{}, Logger: slog.New(slog.DiscardHandler),
		Transport: func(storage.Account) (upstream.Transport, error) { return nil, errors.New("none") }})
	if err != nil {
		b.Fatal(err)
	}
	defer sys.Stop(context.Background())
	recs := storagetest.VariedUsage("paced", 0, 1000)
	b.ReportAllocs()
	cpu0 := cputime.Process()
	for i := 0; b.Loop(); i++ {
		time.Sleep(time.Millisecond)
		sys.Record(recs[i%len(recs)])
	}
	b.ReportMetric(float64(cputime.Process()-cpu0)/float64(b.N), "cpu-ns/op")
}

// refusing is a UsageWriter that refuses its first n calls (storage down,
// and nothing in front of it that journals) and then writes.
type refusing struct {
	batchLog
	n, calls atomic.Int64
}

func (r *refusing) InsertUsage(ctx context.Context, recs []storage.UsageRecord) error {
	if r.calls.Add(1) <= r.n.Load() {
		return errInjected
	}
	return r.batchLog.InsertUsage(ctx, recs)
}

// TestUsageNeverGivesUp: a batch whose writes keep failing is retried
// until one succeeds, however many fail (the recorder used to give up and
// log "usage batch lost" after 6 tries, about 3 s).
func TestUsageNeverGivesUp(t *testing.T) {
	w := &refusing{}
	w.n.Store(10)
	written := make(chan int, 16)
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	pid := spawnMailbox(e, newRecorder(usageConfig{
		store: w, batchSize: 5, interval: time.Hour, maxQueued: 1000, retryBase: time.Millisecond,
		log: slog.New(slog.DiscardHandler), onWritten: func(n int, err error) { written <- n },
	}), "usage", "0", slog.New(slog.DiscardHandler))
	defer func() { <-e.Poison(pid).Done() }()
	for _, r := range storagetest.VariedUsage("retry", 0, 5) {
		e.Send(pid, usageRecord{rec: &r})
	}
	select {
	case n := <-written:
		if n != 5 {
			t.Fatalf("batch of %d written, want 5", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("batch not written within 30s after %d calls", w.calls.Load())
	}
	if c := w.calls.Load(); c != 11 {
		t.Errorf("%d write calls, want 11 (10 refused, then the write)", c)
	}
	if b, _ := w.snapshot(); len(b) != 1 || b[0] != 5 {
		t.Errorf("batches stored: %v", b)
	}
}

// slotLog is a UsageWriter that remembers each batch's first slot and its
// request IDs, as InsertUsage saw them.
type slotLog struct {
	mu    sync.Mutex
	first []*storage.UsageRecord
	ids   [][]string
}

func (s *slotLog) InsertUsage(_ context.Context, recs []storage.UsageRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first = append(s.first, &recs[:1][0])
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.RequestID)
	}
	s.ids = append(s.ids, ids)
	return nil
}

// TestUsageBatchReused: a written batch's slice is filled again by a later
// batch (no new 500-record slice a flush), and every batch holds exactly
// its own records, none of an earlier batch's.
func TestUsageBatchReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := &slotLog{}
		sys, err := Start(Config{
			Store: w, UsageBatch: 4, UsageInterval: time.Second, Logger: slog.New(slog.DiscardHandler),
			Transport: func(storage.Account) (upstream.Transport, error) { return nil, errors.New("none") },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer sys.Stop(context.Background())
		recs := storagetest.VariedUsage("reuse", 0, 14)
		for i, r := range recs {
			sys.Record(r)
			if i%4 == 3 {
				synctest.Wait() // the full batch written and its slice back
			}
		}
		time.Sleep(2 * time.Second) // the last two, at their interval
		synctest.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.ids) != 4 {
			t.Fatalf("%d batches, want 4: %v", len(w.ids), w.ids)
		}
		for b, ids := range w.ids {
			want := 4
			if b == 3 {
				want = 2
			}
			if len(ids) != want {
				t.Fatalf("batch %d: %v, want %d records", b, ids, want)
			}
			for i, id := range ids {
				if id != recs[b*4+i].RequestID {
					t.Errorf("batch %d record %d: %q, want %q", b, i, id, recs[b*4+i].RequestID)
				}
			}
		}
		// The first two batches' slices are new (the second is made at the
		// first's flush, before the first is written); the third fills the
		// first's, the fourth the second's.
		if w.first[0] == w.first[1] || w.first[2] != w.first[0] || w.first[3] != w.first[1] {
			t.Errorf("batches' first slots %p, want the third batch in the first's slice and the fourth in the second's", w.first)
		}
	})
}
