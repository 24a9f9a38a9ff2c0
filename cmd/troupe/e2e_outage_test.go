package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
)

// downStore is a storage.Store that refuses every call while down, as a
// database that stopped does (connection refused).
type downStore struct {
	storage.Store
	down atomic.Bool
}

var errStorageDown = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

func (d *downStore) APIKeyByHash(ctx context.Context, h string) (storage.APIKey, error) {
	if d.down.Load() {
		return storage.APIKey{}, errStorageDown
	}
	return d.Store.APIKeyByHash(ctx, h)
}

func (d *downStore) ListAPIKeys(ctx context.Context) ([]storage.APIKey, error) {
	if d.down.Load() {
		return nil, errStorageDown
	}
	return d.Store.ListAPIKeys(ctx)
}

func (d *downStore) ListAccounts(ctx context.Context) ([]storage.Account, error) {
	if d.down.Load() {
		return nil, errStorageDown
	}
	return d.Store.ListAccounts(ctx)
}

func (d *downStore) InsertUsage(ctx context.Context, recs []storage.UsageRecord) error {
	if d.down.Load() {
		return errStorageDown
	}
	return d.Store.InsertUsage(ctx, recs)
}

func (d *downStore) InsertErrorEvents(ctx context.Context, evs []storage.ErrorEvent) error {
	if d.down.Load() {
		return errStorageDown
	}
	return d.Store.InsertErrorEvents(ctx, evs)
}

func (d *downStore) Ping(context.Context) error {
	if d.down.Load() {
		return errStorageDown
	}
	return nil
}

// startOverStore starts the gateway over store (a wrapper of the embedded
// storage of cfg) in front of a mock fleet of n demo accounts, with one API
// key, and stops it when t ends.
func startOverStore(t *testing.T, cfg *Config, wrap func(storage.Store) *downStore, n int) (*app, *downStore, string, *syncBuffer) {
	t.Helper()
	ctx := t.Context()
	fleet := mock.New(mock.Config{})
	addr, err := fleet.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	fa, pa := demoAccounts(n, addr)
	for _, a := range fa {
		fleet.Add(a)
	}
	inner, err := openStore(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	store := wrap(inner)
	if err := syncDemoAccounts(ctx, store, pa); err != nil {
		t.Fatal(err)
	}
	secret, key, err := gateway.NewKey("outage")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateAPIKey(ctx, key); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	a := &app{cfg: cfg, log: newLogger(cfg, logs), store: store}
	if err := a.start(ctx); err != nil {
		store.Close()
		t.Fatal(err)
	}
	serveTestApp(t, a, logs, n, "gateway")
	return a, store, secret, logs
}

// readyz returns /readyz's status and body.
func readyz(t *testing.T, a *app) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get("http://" + a.addr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// checkStatus returns the status of dependency name in a /readyz body.
func checkStatus(body map[string]any, name string) string {
	checks, _ := body["checks"].([]any)
	for _, c := range checks {
		if m, _ := c.(map[string]any); m["name"] == name {
			s, _ := m["status"].(string)
			return s
		}
	}
	return "absent"
}

func metricsText(t *testing.T, a *app) string {
	t.Helper()
	resp, err := http.Get("http://" + a.addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestStorageOutageKeepsServing is issue 16's findings 2 and 3 in one
// process: storage refuses everything; the gateway's key cache expires
// (InvalidateKeys stands for its 30 s); requests with the known key are
// still served (they got 500 before), a key revoked before the outage stays
// refused, /readyz says "degraded" with 200, /metrics and the log show the
// outage, and the usage records go to the journal. When storage is back
// every served request has exactly one record.
func TestStorageOutageKeepsServing(t *testing.T) {
	cfg := testConfig(t)
	cfg.Log.Level = "info" // the recovery lines
	a, store, secret, logs := startOverStore(t, cfg, func(s storage.Store) *downStore { return &downStore{Store: s} }, 8)
	base := a.baseURL()
	revoked, rk, err := gateway.NewKey("revoked")
	if err != nil {
		t.Fatal(err)
	}
	if rk, err = a.store.CreateAPIKey(t.Context(), rk); err != nil {
		t.Fatal(err)
	}
	if st := status(t, base, revoked, demoOpenAIModel); st != 200 {
		t.Fatalf("second key before revocation: %d", st)
	}
	if err := a.store.DeleteAPIKey(t.Context(), rk.ID); err != nil { // through the wrapper: announced
		t.Fatal(err)
	}
	a.server.InvalidateKeys()
	if st := status(t, base, revoked, demoOpenAIModel); st != 401 {
		t.Fatalf("revoked key before the outage: %d, want 401", st)
	}
	served := 1 // the revoked key's request
	for range 10 {
		if st := status(t, base, secret, demoOpenAIModel); st != 200 {
			t.Fatalf("before the outage: %d", st)
		}
		served++
	}

	store.down.Store(true)
	a.server.InvalidateKeys() // the key cache's entries expire during the outage
	for i := range 40 {
		model := demoOpenAIModel
		if i%2 == 1 {
			model = demoCodexModel
		}
		st, _, body, err := callGateway(base, secret, model)
		if err != nil || st != 200 {
			t.Fatalf("request %d during the outage: %d %s (%v)", i, st, body, err)
		}
		served++
	}
	if st := status(t, base, revoked, demoOpenAIModel); st != 401 {
		t.Errorf("key revoked before the outage, during it: %d, want 401", st)
	}
	if st := status(t, base, "sk-troupe-neverissued0000000000000000000000000", demoOpenAIModel); st != 401 {
		t.Errorf("unknown key during the outage: %d, want 401", st)
	}
	code, body := readyz(t, a)
	if code != 200 || body["status"] != "degraded" || checkStatus(body, "storage") != "degraded" {
		t.Errorf("/readyz during the outage: %d %v", code, body)
	}
	eventually(t, 10*time.Second, "usage records journalled", func() (bool, string) {
		s := a.journal.Stats()
		return s.Pending > 0, ""
	})
	if code, body := readyz(t, a); checkStatus(body, "usage_journal") != "degraded" {
		t.Errorf("/readyz with a journal: %d %v", code, body)
	}
	m := metricsText(t, a)
	for _, want := range []string{"troupe_storage_degraded 1", "troupe_storage_outages_total 1"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(logs.String(), "storage unavailable") || !strings.Contains(logs.String(), "usage records journalled") {
		t.Errorf("the log does not show the outage:\n%s", logs.String())
	}

	store.down.Store(false)
	journalDrained(t, a.journal, 20*time.Second)
	eventually(t, 20*time.Second, "storage healthy", func() (bool, string) { return !a.keys.Degraded(), "" })
	eventually(t, 10*time.Second, "one record per served request", func() (bool, string) {
		n, err := store.CountUsage(t.Context())
		return err == nil && n == int64(served), ""
	})
	if code, body := readyz(t, a); code != 200 || body["status"] != "ready" {
		t.Errorf("/readyz after recovery: %d %v", code, body)
	}
	if !strings.Contains(logs.String(), "storage recovered") || !strings.Contains(logs.String(), "usage journal written to storage") {
		t.Errorf("the log does not show the recovery:\n%s", logs.String())
	}
}
