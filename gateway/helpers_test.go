package gateway

import (
	"bytes"
	"context"
	"github.com/troupe-gw/troupe/internal/poll"
	"io"
	"net"
	"net/http"
	"sync/atomic"

	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// memStore is an in-memory storage.Store for gateway unit tests.
type memStore struct {
	storage.Users // nil: tests of tenants use a real store
	mu            sync.Mutex
	keys          map[string]storage.APIKey
	usage         []storage.UsageRecord
	events        []storage.ErrorEvent
}

func newMemStore() *memStore { return &memStore{keys: map[string]storage.APIKey{}} }

func (m *memStore) ListAccounts(context.Context) ([]storage.Account, error) { return nil, nil }
func (m *memStore) GetAccount(context.Context, string) (storage.Account, error) {
	return storage.Account{}, storage.ErrNotFound
}
func (m *memStore) PutAccount(_ context.Context, a storage.Account) (storage.Account, error) {
	return a, nil
}
func (m *memStore) DeleteAccount(context.Context, string) error { return nil }
func (m *memStore) AccountChanges(_ context.Context, since int64, _ bool) (storage.AccountChanges, error) {
	return storage.AccountChanges{Version: max(since, 1)}, nil
}
func (m *memStore) PruneAccountTombstones(context.Context, time.Time) (int64, error) { return 0, nil }
func (m *memStore) OpenCredentials(string) (storage.Credentials, error) {
	return storage.Credentials{}, storage.ErrUnseal
}
func (m *memStore) CreateAPIKey(_ context.Context, k storage.APIKey) (storage.APIKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys[k.Hash] = k
	return k, nil
}
func (m *memStore) APIKeyByHash(_ context.Context, h string) (storage.APIKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k, ok := m.keys[h]
	if !ok {
		return k, storage.ErrNotFound
	}
	return k, nil
}
func (m *memStore) ListAPIKeys(context.Context) ([]storage.APIKey, error) { return nil, nil }
func (m *memStore) DeleteAPIKey(context.Context, string) error            { return nil }
func (m *memStore) InsertUsage(_ context.Context, r []storage.UsageRecord) error {
	m.mu.Lock()
	m.usage = append(m.usage, r...)
	m.mu.Unlock()
	return nil
}
func (m *memStore) CountUsage(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int64(len(m.usage)), nil
}
func (m *memStore) UpdateAPIKey(_ context.Context, k storage.APIKey) (storage.APIKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for h, old := range m.keys {
		if old.ID == k.ID {
			k.Hash, k.Prefix, k.CreatedAt = old.Hash, old.Prefix, old.CreatedAt
			m.keys[h] = k
			return k, nil
		}
	}
	return storage.APIKey{}, storage.ErrNotFound
}
func (m *memStore) Rollups(context.Context, storage.UsageQuery) ([]storage.UsageRollup, error) {
	return nil, nil
}
func (m *memStore) UsageRecords(context.Context, storage.RequestLogQuery) ([]storage.UsageRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]storage.UsageRecord(nil), m.usage...), nil
}
func (m *memStore) ErrorEvents(context.Context, storage.RequestLogQuery) ([]storage.ErrorEvent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]storage.ErrorEvent(nil), m.events...), nil
}
func (m *memStore) UsageSeries(_ context.Context, q storage.SeriesQuery) ([]storage.SeriesBucket, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return storage.SeriesOf(q, m.usage, m.events), nil
}
func (m *memStore) InsertErrorEvents(_ context.Context, evs []storage.ErrorEvent) error {
	m.mu.Lock()
	m.events = append(m.events, evs...)
	m.mu.Unlock()
	return nil
}
func (m *memStore) PruneUsage(context.Context, time.Time, time.Time) (int64, int64, error) {
	return 0, 0, nil
}
func (m *memStore) GetSetting(context.Context, string) (string, error) {
	return "", storage.ErrNotFound
}
func (m *memStore) PutSetting(context.Context, string, string) error { return nil }
func (m *memStore) ListSettings(context.Context) (map[string]string, error) {
	return map[string]string{}, nil
}
func (m *memStore) SavePolicy(_ context.Context, name, source string) (storage.PolicyVersion, error) {
	return storage.PolicyVersion{Name: name, Version: 1, Source: source}, nil
}
func (m *memStore) GetPolicy(context.Context, string, int) (storage.PolicyVersion, error) {
	return storage.PolicyVersion{}, storage.ErrNotFound
}
func (m *memStore) PolicyHistory(context.Context, string) ([]storage.PolicyVersion, error) {
	return nil, storage.ErrNotFound
}
func (m *memStore) ListPolicies(context.Context) ([]storage.PolicyVersion, error) { return nil, nil }
func (m *memStore) ActivatePolicy(context.Context, string, int) (storage.PolicyVersion, error) {
	return storage.PolicyVersion{}, storage.ErrNotFound
}
func (m *memStore) ActivePolicy(context.Context) (storage.PolicyVersion, error) {
	return storage.PolicyVersion{}, storage.ErrNotFound
}
func (m *memStore) Close() error { return nil }

// cannedTransport answers every request with the same status, content type and body.
type cannedTransport struct {
	status int
	ctype  string
	body   []byte
}

func (c cannedTransport) Do(_ context.Context, _ *upstream.Request) (*upstream.Response, error) {
	h := http.Header{}
	h.Set("Content-Type", c.ctype)
	return &upstream.Response{Status: c.status, Header: h, Body: io.NopCloser(bytes.NewReader(c.body))}, nil
}

// testServer builds a Server over n openai accounts answering with tr and
// returns it with a valid API key.
func testServer(t testing.TB, n int, tr upstream.Transport) (*Server, *actors.System, string) {
	t.Helper()
	s, sys, secret, _ := testServerStore(t, n, tr)
	return s, sys, secret
}

// testServerStore is testServer that also returns the server's store.
func testServerStore(t testing.TB, n int, tr upstream.Transport) (*Server, *actors.System, string, *memStore) {
	t.Helper()
	store := newMemStore()
	sys := startSystem(t, actors.Config{Store: store, Transport: func(storage.Account) (upstream.Transport, error) { return tr, nil }})
	for i := range n {
		sys.PutAccount(storage.Account{ID: "a" + string(rune('0'+i)), Name: "acct-" + string(rune('0'+i)),
			Provider: storage.ProviderOpenAI, Models: []string{"m"}, MaxConcurrency: 1 << 20})
	}
	waitUntil(t, "the accounts to start", func() bool { return len(sys.Views()) >= n })
	secret, k, err := NewKey("test")
	if err != nil {
		t.Fatal(err)
	}
	store.CreateAPIKey(context.Background(), k)
	s := New(Config{MaxWait: 100 * time.Millisecond}, sys, store, nil, nil, nil)
	return s, sys, secret, store
}

// inFlight sums the in-flight leases of every account view.
func inFlight(sys *actors.System) int {
	n := 0
	for _, v := range sys.Views() {
		n += v.InFlight
	}
	return n
}

// waitIdle waits until every lease is back: a release reaches the
// account's actor, which then publishes its view, after the request ended.
func waitIdle(t testing.TB, sys *actors.System) {
	t.Helper()
	waitUntil(t, "every lease to be returned", func() bool { return inFlight(sys) == 0 })
}

// waitUntil waits for state the actors publish asynchronously (their
// views), which no signal announces, looking every millisecond. It fails t
// after 30 s: a bound on a wait that should take microseconds, generous
// enough for a machine loaded by other test packages, not a measure.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 30*time.Second, what, cond)
}

// flaky fails its first `fail` calls with a 500, then answers like ok.
type flaky struct {
	mu   sync.Mutex
	fail int
	ok   upstream.Transport
}

func (f *flaky) Do(ctx context.Context, r *upstream.Request) (*upstream.Response, error) {
	f.mu.Lock()
	fail := f.fail > 0
	f.fail--
	f.mu.Unlock()
	if fail {
		return cannedTransport{500, "application/json", []byte(`{"error":{"message":"boom","type":"server_error","param":null,"code":null}}`)}.Do(ctx, r)
	}
	return f.ok.Do(ctx, r)
}

// counting counts calls to inner.
type counting struct {
	n     atomic.Int64
	inner upstream.Transport
}

func (c *counting) Do(ctx context.Context, r *upstream.Request) (*upstream.Response, error) {
	c.n.Add(1)
	return c.inner.Do(ctx, r)
}

// scripted answers the n-th call with answers[n] (the last one repeats).
type scripted struct {
	mu      sync.Mutex
	n       int
	answers []upstream.Transport
}

func (s *scripted) Do(ctx context.Context, r *upstream.Request) (*upstream.Response, error) {
	s.mu.Lock()
	a := s.answers[min(s.n, len(s.answers)-1)]
	s.n++
	s.mu.Unlock()
	return a.Do(ctx, r)
}

func (s *scripted) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// slowSSE streams body after delay, honouring ctx like a network body.
type slowSSE struct {
	delay time.Duration
	body  []byte
}

func (s slowSSE) Do(ctx context.Context, _ *upstream.Request) (*upstream.Response, error) {
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	pr, pw := io.Pipe()
	go func() {
		select {
		case <-time.After(s.delay):
			pw.Write(s.body)
			pw.Close()
		case <-ctx.Done():
			pw.CloseWithError(&upstream.Error{Kind: upstream.KindCanceled, Err: ctx.Err()})
		}
	}()
	return &upstream.Response{Status: 200, Header: h, Body: pr}, nil
}

// testServerCfg is testServer with a gateway config.
func testServerCfg(t testing.TB, n int, tr upstream.Transport, cfg Config) (*Server, *actors.System, string) {
	s, sys, key := testServer(t, n, tr)
	cfg.defaults()
	s.cfg = cfg
	return s, sys, key
}

// Admin users and the request log are exercised with the SQLite store (package admin).
func (m *memStore) CreateAdminUser(_ context.Context, u storage.AdminUser) (storage.AdminUser, error) {
	return u, nil
}
func (m *memStore) GetAdminUser(context.Context, string) (storage.AdminUser, error) {
	return storage.AdminUser{}, storage.ErrNotFound
}
func (m *memStore) ListAdminUsers(context.Context) ([]storage.AdminUser, error) {
	return []storage.AdminUser{}, nil
}
func (m *memStore) UpdateAdminUser(context.Context, storage.AdminUser) (storage.AdminUser, error) {
	return storage.AdminUser{}, storage.ErrNotFound
}
func (m *memStore) DeleteAdminUser(context.Context, string) error { return storage.ErrNotFound }
func (m *memStore) ListUsageRecords(context.Context, storage.UsageRecordQuery) ([]storage.UsageRecord, error) {
	return nil, nil
}

// serveTCP serves s on a fresh 127.0.0.1 port until the test ends and
// returns the listener (its Addr is where to dial).
func serveTCP(t testing.TB, s *Server) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.srv.Shutdown() })
	return ln
}

// dialTCP connects to ln for raw HTTP, closed when the test ends, with a
// 20 s deadline for everything the test does on it.
func dialTCP(t testing.TB, ln net.Listener) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	return conn
}

// startSystem starts an actors.System on cfg, stopped when t ends.
func startSystem(t testing.TB, cfg actors.Config) *actors.System {
	t.Helper()
	sys, err := actors.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sys.Stop(ctx)
	})
	return sys
}
