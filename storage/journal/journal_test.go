package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// store is a Writer that keeps records once per request id (as both
// backends do) and refuses every write while down.
type store struct {
	mu       sync.Mutex
	recs     map[string]int // request id → times stored (must stay 1)
	events   map[string]bool
	offered  int // records offered, duplicates included
	down     atomic.Bool
	hang     atomic.Bool // block until the context ends
	commitUp atomic.Bool // commit, then report a failure (an ambiguous commit)
}

func newStore() *store { return &store{recs: map[string]int{}, events: map[string]bool{}} }

var errRefused = errors.New("connection refused")

func (s *store) InsertUsage(ctx context.Context, recs []storage.UsageRecord) error {
	if s.hang.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	if s.down.Load() {
		return errRefused
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		s.offered++
		if _, ok := s.recs[r.RequestID]; !ok {
			s.recs[r.RequestID] = 1
		}
	}
	if s.commitUp.Load() {
		return errors.New("connection reset during commit")
	}
	return nil
}

func (s *store) InsertErrorEvents(_ context.Context, evs []storage.ErrorEvent) error {
	if s.down.Load() {
		return errRefused
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range evs {
		s.events[fmt.Sprintf("%s/%d", e.RequestID, e.Attempt)] = true
	}
	return nil
}

func (s *store) count() (recs, events int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs), len(s.events)
}

func batch(from, n int) []storage.UsageRecord {
	recs := make([]storage.UsageRecord, n)
	for i := range recs {
		recs[i] = storage.UsageRecord{RequestID: fmt.Sprintf("req-%06d", from+i), At: time.Unix(1_800_000_000, 0).UTC(),
			KeyID: "k", Model: "m", Status: 200, Attempts: 1, InputTokens: int64(i), Latency: time.Millisecond}
	}
	return recs
}

type harness struct {
	path  string
	store *store
	j     *Usage
	log   *bytes.Buffer
	logMu *sync.Mutex
}

type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func open(t *testing.T, path string, st *store, opts Options) *harness {
	t.Helper()
	h := &harness{path: path, store: st, log: &bytes.Buffer{}, logMu: &sync.Mutex{}}
	if opts.RetryInterval == 0 {
		opts.RetryInterval = 5 * time.Millisecond
	}
	opts.Logger = slog.New(slog.NewTextHandler(lockedWriter{h.logMu, h.log}, nil))
	j, err := Open(path, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.j = j
	t.Cleanup(func() { j.Close() })
	return h
}

// drained waits until the replay leaves the journal empty (WaitDrained),
// failing the test after 10 s.
func (h *harness) drained(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := h.j.WaitDrained(ctx); err != nil {
		t.Fatalf("journal not drained: %v; %+v", err, h.j.Stats())
	}
	if st := h.j.Stats(); st.Bytes != 0 || st.Pending != 0 {
		t.Fatalf("WaitDrained returned with %+v", st)
	}
}

// TestOutageJournalsThenWritesOnce: batches storage refuses are journalled
// (the call succeeds), later batches go behind them without touching
// storage, and once storage is back every record is written exactly once
// and the file is emptied.
func TestOutageJournalsThenWritesOnce(t *testing.T) {
	st := newStore()
	h := open(t, filepath.Join(t.TempDir(), "usage.journal"), st, Options{})
	ctx := t.Context()
	if err := h.j.InsertUsage(ctx, batch(0, 10)); err != nil {
		t.Fatal(err)
	}
	st.down.Store(true)
	for i := 1; i <= 20; i++ {
		if err := h.j.InsertUsage(ctx, batch(i*10, 10)); err != nil {
			t.Fatalf("batch %d during the outage: %v", i, err)
		}
	}
	if err := h.j.InsertErrorEvents(ctx, []storage.ErrorEvent{{RequestID: "req-000015", Attempt: 1}}); err != nil {
		t.Fatal(err)
	}
	s := h.j.Stats()
	if s.Pending != 201 || s.Journalled != 201 || s.Bytes == 0 {
		t.Fatalf("stats during the outage: %+v", s)
	}
	if hl := h.j.Health(); !hl.Degraded || hl.Down || hl.Since.IsZero() {
		t.Fatalf("health during the outage: %+v", hl)
	}
	if n, _ := st.count(); n != 10 {
		t.Fatalf("%d records stored during the outage, want the 10 before it", n)
	}
	st.down.Store(false)
	h.drained(t)
	recs, events := st.count()
	if recs != 210 || events != 1 {
		t.Fatalf("after recovery: %d records, %d events; want 210, 1", recs, events)
	}
	if st.offered != 210 {
		t.Errorf("records offered to storage %d times, want 210 (each once)", st.offered)
	}
	if s := h.j.Stats(); s.Replayed != 201 || s.Bytes != 0 {
		t.Errorf("stats after recovery: %+v", s)
	}
	if fi, err := os.Stat(h.path); err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o600 {
		t.Errorf("journal file after recovery: %v, %v", fi, err)
	}
	if hl := h.j.Health(); hl.Degraded || hl.Down {
		t.Errorf("health after recovery: %+v", hl)
	}
	// Back to direct writes.
	if err := h.j.InsertUsage(ctx, batch(1000, 5)); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.count(); n != 215 {
		t.Errorf("direct write after recovery: %d records", n)
	}
}

// TestRestartReplays: what the journal holds when its process stops (or
// dies: nothing but the fsynced file survives) is written by the next Open.
func TestRestartReplays(t *testing.T) {
	path := filepath.Join(t.TempDir(), "usage.journal")
	st := newStore()
	st.down.Store(true)
	h := open(t, path, st, Options{RetryInterval: time.Hour})
	for i := range 5 {
		if err := h.j.InsertUsage(t.Context(), batch(i*100, 100)); err != nil {
			t.Fatal(err)
		}
	}
	h.j.Close()
	if n, _ := st.count(); n != 0 {
		t.Fatalf("%d records stored while down", n)
	}
	st.down.Store(false)
	h2 := open(t, path, st, Options{})
	h2.drained(t)
	if n, _ := st.count(); n != 500 || st.offered != 500 {
		t.Fatalf("after the restart: %d records stored, %d offered; want 500, 500", n, st.offered)
	}
}

// TestTornEnd: a frame cut short by a kill during its append is dropped
// at Open, and the frames before it are written.
func TestTornEnd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "usage.journal")
	st := newStore()
	st.down.Store(true)
	h := open(t, path, st, Options{RetryInterval: time.Hour})
	for i := range 3 {
		if err := h.j.InsertUsage(t.Context(), batch(i*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	good := h.j.Stats().Bytes
	h.j.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0, 0, 1, 0, 0xde, 0xad, 0xbe, 0xef, '{', '"', 'r'}) // a header and the start of a payload
	f.Close()

	h2 := open(t, path, st, Options{})
	if s := h2.j.Stats(); s.Pending != 30 || s.Bytes != good {
		t.Fatalf("after reopening: %+v (journal of %d good bytes)", s, good)
	}
	st.down.Store(false)
	h2.drained(t)
	if n, _ := st.count(); n != 30 {
		t.Fatalf("%d records written, want the 30 of the good frames", n)
	}
}

// TestAmbiguousCommit: a batch storage committed although its write
// reported a failure is journalled and replayed, and stored once.
func TestAmbiguousCommit(t *testing.T) {
	st := newStore()
	h := open(t, filepath.Join(t.TempDir(), "usage.journal"), st, Options{})
	st.commitUp.Store(true)
	if err := h.j.InsertUsage(t.Context(), batch(0, 50)); err != nil {
		t.Fatal(err)
	}
	st.commitUp.Store(false)
	h.drained(t)
	st.mu.Lock()
	defer st.mu.Unlock()
	for id, n := range st.recs {
		if n != 1 {
			t.Fatalf("%s stored %d times", id, n)
		}
	}
	if len(st.recs) != 50 || st.offered < 100 {
		t.Fatalf("%d records, offered %d times; want 50 stored, offered at least twice", len(st.recs), st.offered)
	}
}

// TestHangingStorage: a write that has not committed within AttemptTimeout
// is journalled, so a hung database holds records in memory no longer than that.
func TestHangingStorage(t *testing.T) {
	st := newStore()
	st.hang.Store(true)
	h := open(t, filepath.Join(t.TempDir(), "usage.journal"), st, Options{AttemptTimeout: 20 * time.Millisecond, RetryInterval: time.Hour})
	if err := h.j.InsertUsage(t.Context(), batch(0, 10)); err != nil {
		t.Fatal(err)
	}
	if s := h.j.Stats(); s.Pending != 10 {
		t.Fatalf("after a hung write: %+v, want it journalled", s)
	}
}

// TestFull: a batch that does not fit is refused with ErrFull and the
// journal reports itself down; once storage takes the journal, it has room
// again.
func TestFull(t *testing.T) {
	st := newStore()
	st.down.Store(true)
	h := open(t, filepath.Join(t.TempDir(), "usage.journal"), st, Options{MaxBytes: 4 << 10})
	var err error
	i := 0
	for ; err == nil && i < 100; i++ {
		err = h.j.InsertUsage(t.Context(), batch(i*10, 10))
	}
	if !errors.Is(err, ErrFull) {
		t.Fatalf("after %d batches: %v, want ErrFull", i, err)
	}
	if hl := h.j.Health(); !hl.Down || !h.j.Stats().Full {
		t.Fatalf("health when full: %+v", hl)
	}
	st.down.Store(false)
	h.drained(t)
	if hl := h.j.Health(); hl.Down || hl.Degraded {
		t.Fatalf("health after recovery: %+v", hl)
	}
	if n, _ := st.count(); n != (i-1)*10 {
		t.Fatalf("%d records written, want %d", n, (i-1)*10)
	}
}

// TestInvalidNotJournalled: a batch storage refuses as invalid is returned
// to the caller, not journalled (it never could be written).
func TestInvalidNotJournalled(t *testing.T) {
	h := open(t, filepath.Join(t.TempDir(), "usage.journal"), newStore(), Options{})
	h.j.w = invalidWriter{}
	if err := h.j.InsertUsage(t.Context(), batch(0, 1)); !errors.Is(err, storage.ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	if s := h.j.Stats(); s.Pending != 0 || s.Bytes != 0 {
		t.Fatalf("an invalid batch was journalled: %+v", s)
	}
}

type invalidWriter struct{}

func (invalidWriter) InsertUsage(context.Context, []storage.UsageRecord) error {
	return fmt.Errorf("%w: bad record", storage.ErrInvalid)
}
func (invalidWriter) InsertErrorEvents(context.Context, []storage.ErrorEvent) error { return nil }
