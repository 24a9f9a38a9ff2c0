package admin

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
	"github.com/valyala/fasthttp"
)

// editStore is a store of one account and one user in memory whose first
// write (PutAccount or UpdateUser) stops before it is stored until proceed
// is closed, after telling writing: the window in which a second editor
// of the same record reads, changes and stores it.
type editStore struct {
	storage.Store // nil: only the methods below are used
	mu            sync.Mutex
	acct          storage.Account
	user          storage.User
	key           storage.APIKey
	writes        int
	writing       chan struct{}
	proceed       chan struct{}
}

func (m *editStore) hold() {
	m.mu.Lock()
	m.writes++
	first := m.writes == 1
	m.mu.Unlock()
	if first {
		close(m.writing)
		<-m.proceed
	}
}

func (m *editStore) GetAccount(_ context.Context, id string) (storage.Account, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id != m.acct.ID && id != m.acct.Name {
		return storage.Account{}, storage.ErrNotFound
	}
	a := m.acct
	a.Tags = append([]string(nil), a.Tags...)
	return a, nil
}

func (m *editStore) PutAccount(_ context.Context, a storage.Account) (storage.Account, error) {
	m.hold()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acct = a
	return a, nil
}

func (m *editStore) GetUser(_ context.Context, id string) (storage.User, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id != m.user.ID && id != m.user.Name {
		return storage.User{}, storage.ErrNotFound
	}
	return m.user, nil
}

func (m *editStore) UpdateUser(_ context.Context, u storage.User) (storage.User, error) {
	m.hold()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.user = u
	return u, nil
}

func (m *editStore) ListAPIKeys(context.Context) ([]storage.APIKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.key
	k.Models = append([]string(nil), k.Models...)
	return []storage.APIKey{k}, nil
}

func (m *editStore) UpdateAPIKey(_ context.Context, k storage.APIKey) (storage.APIKey, error) {
	m.hold()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.key = k
	return k, nil
}

func (m *editStore) Balance(context.Context, string) (int64, error) { return 0, nil }
func (m *editStore) Ledger(context.Context, storage.LedgerQuery) ([]storage.LedgerEntry, error) {
	return nil, nil
}

// editPool is a pool of no accounts.
type editPool struct{}

func (editPool) Views() []actors.View        { return nil }
func (editPool) EachView(func(*actors.View)) {}
func (editPool) PutAccount(storage.Account)  {}
func (editPool) RemoveAccount(string)        {}
func (editPool) SchedulerStats(context.Context) (actors.SchedulerStats, error) {
	return actors.SchedulerStats{}, nil
}
func (editPool) Scores(context.Context) (map[string]actors.Scored, error) { return nil, nil }

// editFront is a front whose key cache has nothing to drop.
type editFront struct{ Front }

func (editFront) InvalidateKeys() {}

// patch runs PATCH path with body through the admin API's handler for
// kind ("accounts", "users" or "keys") and returns the status.
func patch(s *Server, kind, id, body string) int {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod("PATCH")
	ctx.Request.SetRequestURI("/api/admin/" + kind + "/" + id)
	ctx.Request.SetBody([]byte(body))
	switch kind {
	case "accounts":
		s.adminAccounts(&ctx, "PATCH", []string{id})
	case "users":
		s.adminUsers(&ctx, &principal{}, "PATCH", []string{id})
	default:
		s.keyRoute(&ctx, context.Background(), "PATCH", []string{id}, time.Now())
	}
	return ctx.Response.StatusCode()
}

// Two admins editing different fields of the same account, user or API
// key at once both get their change: the second edit read the record
// while the first was storing its own, so a plain read-modify-write wrote
// back the fields it had read and the first change was lost (tester's
// finding: of five pairs of PATCH {"priority"} and PATCH {"tags"} sent at
// once to troupe serve, one pair kept the tags and lost the priority; a
// user's {"rpm"} and {"group"} likewise).
func TestConcurrentEditsKeepBothChanges(t *testing.T) {
	for _, tc := range []struct {
		kind, first, second string
		check               func(t *testing.T, m *editStore)
	}{
		{"accounts", `{"priority":7}`, `{"tags":["t1"]}`, func(t *testing.T, m *editStore) {
			if m.acct.Priority != 7 || len(m.acct.Tags) != 1 {
				t.Errorf("account after both edits: priority %d, tags %v; want 7 and [t1]", m.acct.Priority, m.acct.Tags)
			}
		}},
		{"users", `{"rpm":7}`, `{"group":"g1"}`, func(t *testing.T, m *editStore) {
			if m.user.RPM != 7 || m.user.Group != "g1" {
				t.Errorf("user after both edits: rpm %d, group %q; want 7 and g1", m.user.RPM, m.user.Group)
			}
		}},
		{"keys", `{"admin":true}`, `{"group":"g1"}`, func(t *testing.T, m *editStore) {
			if !m.key.Admin || m.key.Group != "g1" {
				t.Errorf("key after both edits: admin %v, group %q; want true and g1", m.key.Admin, m.key.Group)
			}
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := &editStore{
					acct: storage.Account{ID: "a1", Name: "acct", Provider: storage.ProviderOpenAI, BaseURL: "http://127.0.0.1:1/v1", MaxConcurrency: 1,
						Credentials: storage.Credentials{APIKey: "sk-x"}, CreatedAt: time.Now()},
					user:    storage.User{ID: "u1", Name: "alice"},
					key:     storage.APIKey{ID: "k1", Name: "ops", Prefix: "sk-troupe-abcd"},
					writing: make(chan struct{}), proceed: make(chan struct{}),
				}
				s := New(Deps{Front: editFront{}, Pool: editPool{}, Store: m})
				id := map[string]string{"accounts": "acct", "users": "alice", "keys": "ops"}[tc.kind]
				var wg sync.WaitGroup
				var st1, st2 int
				wg.Go(func() { st1 = patch(s, tc.kind, id, tc.first) })
				<-m.writing // the first edit is storing its change
				wg.Go(func() { st2 = patch(s, tc.kind, id, tc.second) })
				synctest.Wait() // the second has stored its change, or waits for the first
				close(m.proceed)
				wg.Wait()
				if st1 != 200 || st2 != 200 {
					t.Fatalf("statuses %d, %d; want 200, 200", st1, st2)
				}
				tc.check(t, m)
			})
		})
	}
}
