package lastknown

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/sqlite"
)

// outage is a backend that fails every key read and ping while down.
type outage struct {
	storage.Store
	down  atomic.Bool
	calls atomic.Int64 // APIKeyByHash calls that reached it
}

var errDown = errors.New("connection refused")

func (o *outage) APIKeyByHash(ctx context.Context, hash string) (storage.APIKey, error) {
	o.calls.Add(1)
	if o.down.Load() {
		return storage.APIKey{}, errDown
	}
	return o.Store.APIKeyByHash(ctx, hash)
}

func (o *outage) ListAPIKeys(ctx context.Context) ([]storage.APIKey, error) {
	if o.down.Load() {
		return nil, errDown
	}
	return o.Store.ListAPIKeys(ctx)
}

func (o *outage) Ping(context.Context) error {
	if o.down.Load() {
		return errDown
	}
	return nil
}

// syncLog is a log sink safe for the background loop's writes.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type harness struct {
	backend *outage
	store   *Store
	changes chan bool
	log     *syncLog
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	sealer, err := storage.NewSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.Open(t.Context(), sqlite.MemoryPath, sealer)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{backend: &outage{Store: db}, changes: make(chan bool, 16), log: &syncLog{}}
	h.store, err = New(t.Context(), h.backend, Options{
		ProbeInterval: 5 * time.Millisecond,
		Logger:        slog.New(slog.NewTextHandler(h.log, nil)),
		OnChange:      func(d bool) { h.changes <- d },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.store.Close() })
	return h
}

// wantChange waits for the wrapper to turn degraded (true) or healthy.
func (h *harness) wantChange(t *testing.T, want bool) {
	t.Helper()
	select {
	case got := <-h.changes:
		if got != want {
			t.Fatalf("state change to degraded=%v, want %v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no change to degraded=%v within 10s", want)
	}
}

func (h *harness) key(t *testing.T, name string) storage.APIKey {
	t.Helper()
	k, err := h.store.CreateAPIKey(t.Context(), storage.APIKey{Name: name, Hash: storage.HashKey("sk-troupe-" + name), Prefix: "sk-troupe-" + name[:1]})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestOutageServesLastKnownKeys: during an outage a known key is answered
// as it was, a key disabled or deleted before the outage stays refused, a
// hash never seen is not found — and none of them reaches the backend.
func TestOutageServesLastKnownKeys(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	good := h.key(t, "good")
	off := h.key(t, "off")
	gone := h.key(t, "gone")
	off.Disabled = true
	if _, err := h.store.UpdateAPIKey(ctx, off); err != nil {
		t.Fatal(err)
	}
	if err := h.store.DeleteAPIKey(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	// The writes announced changes; the refresh they start makes the list
	// current again (a lookup through the healthy wrapper is current too).
	if _, err := h.store.APIKeyByHash(ctx, good.Hash); err != nil {
		t.Fatal(err)
	}
	waitCurrent(t, h.store)

	h.backend.down.Store(true)
	if _, err := h.store.APIKeyByHash(ctx, good.Hash); err != nil {
		t.Fatalf("first lookup in the outage: %v", err) // answered from the last known state
	}
	h.wantChange(t, true)
	before := h.backend.calls.Load()
	for range 3 {
		k, err := h.store.APIKeyByHash(ctx, good.Hash)
		if err != nil || k.ID != good.ID || k.Disabled {
			t.Fatalf("known key during the outage: %+v, %v", k, err)
		}
		if k, err := h.store.APIKeyByHash(ctx, off.Hash); err != nil || !k.Disabled {
			t.Fatalf("key disabled before the outage: %+v, %v (want it disabled)", k, err)
		}
		if _, err := h.store.APIKeyByHash(ctx, gone.Hash); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("key deleted before the outage: %v, want ErrNotFound", err)
		}
		if _, err := h.store.APIKeyByHash(ctx, storage.HashKey("sk-troupe-never")); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("unknown key during the outage: %v, want ErrNotFound", err)
		}
	}
	if n := h.backend.calls.Load() - before; n != 0 {
		t.Errorf("%d lookups reached the backend while degraded", n)
	}
	st := h.store.Stats()
	if !st.Degraded || st.StaleAnswers < 12 || st.Outages != 1 || st.Keys != 2 {
		t.Errorf("stats during the outage: %+v", st)
	}
	if hl := h.store.Health(); !hl.Degraded || hl.Down || hl.Since.IsZero() || hl.Detail == "" {
		t.Errorf("health during the outage: %+v", hl)
	}

	h.backend.down.Store(false)
	h.wantChange(t, false)
	if hl := h.store.Health(); hl.Degraded || hl.Detail != "" {
		t.Errorf("health after recovery: %+v", hl)
	}
	if k, err := h.store.APIKeyByHash(ctx, good.Hash); err != nil || k.ID != good.ID {
		t.Fatalf("after recovery: %+v, %v", k, err)
	}
	logs := h.log.String()
	if strings.Count(logs, "storage unavailable") != 1 || strings.Count(logs, "storage recovered") != 1 {
		t.Errorf("want one outage and one recovery line, got:\n%s", logs)
	}
}

// TestChangeDuringOutageUnverified: a key change announced after the last
// read of the keys (a revocation on another instance just before the
// outage) leaves no current state, so lookups fail instead of trusting the
// old state; a refresh after recovery makes them current again.
func TestChangeDuringOutageUnverified(t *testing.T) {
	h := newHarness(t)
	ctx := t.Context()
	good := h.key(t, "good")
	waitCurrent(t, h.store)

	h.backend.down.Store(true)
	h.store.KeysChanged() // e.g. `troupe keys revoke` elsewhere; the refresh it starts fails
	h.wantChange(t, true)
	if _, err := h.store.APIKeyByHash(ctx, good.Hash); err == nil || errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("key whose state predates an announced change: %v, want an unverifiable error", err)
	}
	if _, err := h.store.APIKeyByHash(ctx, storage.HashKey("sk-troupe-never")); err == nil || errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("unknown key after an announced change: %v, want an unverifiable error", err)
	}
	if st := h.store.Stats(); st.Unverified != 2 {
		t.Errorf("Unverified = %d, want 2", st.Unverified)
	}
	h.backend.down.Store(false)
	h.wantChange(t, false)
	if k, err := h.store.APIKeyByHash(ctx, good.Hash); err != nil || k.ID != good.ID {
		t.Fatalf("after recovery: %+v, %v", k, err)
	}
}

// TestCallerCancelIsNotAnOutage: a lookup whose own context ended does not
// turn the wrapper degraded.
func TestCallerCancelIsNotAnOutage(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := h.store.APIKeyByHash(ctx, storage.HashKey("sk-troupe-x")); err == nil {
		t.Fatal("lookup with a cancelled context succeeded")
	}
	if h.store.Degraded() {
		t.Fatal("a cancelled lookup turned the store degraded")
	}
}

// waitCurrent makes the wrapper's key list current, as the refresh a
// write starts in the background would.
func waitCurrent(t *testing.T, s *Store) {
	t.Helper()
	if err := s.refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestRefreshDuringOutageTrusts: a refresh asked for because announcements
// may have been missed (the cache recovered) leaves known keys serving
// while storage is still down.
func TestRefreshDuringOutageTrusts(t *testing.T) {
	h := newHarness(t)
	good := h.key(t, "good")
	waitCurrent(t, h.store)
	h.backend.down.Store(true)
	if _, err := h.store.APIKeyByHash(t.Context(), good.Hash); err != nil {
		t.Fatal(err)
	}
	h.wantChange(t, true)
	h.store.Refresh()
	if k, err := h.store.APIKeyByHash(t.Context(), good.Hash); err != nil || k.ID != good.ID {
		t.Fatalf("known key after a refresh request during the outage: %+v, %v", k, err)
	}
}
