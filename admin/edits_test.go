package admin

import (
	"context"
	"strings"
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

// TestEditConflictAcrossInstances: an admin who read an account, a user
// or an API key and sends its "version" back with a PATCH gets 409
// edit_conflict, naming the record and saying to reload, when another
// instance (a write straight to the shared store here) changed the record
// since; nothing is written, and the other change stays. The same PATCH
// with the current version, or without one, applies.
func TestEditConflictAcrossInstances(t *testing.T) {
	e := newAdminEnv(t, 1)
	c := e.login()
	ctx := context.Background()
	msg := func(r *response) string {
		em, _ := r.json["error"].(map[string]any)
		s, _ := em["message"].(string)
		return s
	}
	conflict := func(what string, r *response, name string) {
		t.Helper()
		r.want(t, 409)
		if r.errCode() != "edit_conflict" || r.errParam() != "version" || !strings.Contains(msg(r), name) ||
			!strings.Contains(msg(r), "was changed by someone else since you read it") || !strings.Contains(msg(r), "Reload it") {
			t.Fatalf("%s: %s", what, r.body)
		}
	}
	version := func(r *response) float64 {
		if u, ok := r.json["user"].(map[string]any); ok {
			return u["version"].(float64)
		}
		return r.json["version"].(float64)
	}

	// An account.
	read := c.do("GET", "/api/admin/accounts/acct-a", nil).want(t, 200)
	v := version(read)
	a, err := e.store.GetAccount(ctx, "acct-a")
	if err != nil {
		t.Fatal(err)
	}
	a.Priority = 5
	if _, err := e.store.PutAccount(ctx, a); err != nil { // the other instance
		t.Fatal(err)
	}
	conflict("account", c.do("PATCH", "/api/admin/accounts/acct-a", map[string]any{"priority": 7, "version": v}), "acct-a")
	if got, _ := e.store.GetAccount(ctx, "acct-a"); got.Priority != 5 {
		t.Fatalf("priority %d after the refused edit, want the other instance's 5", got.Priority)
	}
	cur := version(c.do("GET", "/api/admin/accounts/acct-a", nil).want(t, 200))
	if r := c.do("PATCH", "/api/admin/accounts/acct-a", map[string]any{"priority": 7, "version": cur}).want(t, 200); r.json["priority"].(float64) != 7 || version(r) <= cur {
		t.Fatalf("edit at the current version: %s", r.body)
	}
	c.do("PATCH", "/api/admin/accounts/acct-a", map[string]any{"tags": []string{"x"}}).want(t, 200)

	// A user.
	uid := c.do("POST", "/api/admin/users", map[string]any{"name": "alice"}).want(t, 201).json["id"].(string)
	uv := version(c.do("GET", "/api/admin/users/"+uid, nil).want(t, 200))
	u, err := e.store.GetUser(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	u.RPM = 5
	if _, err := e.store.UpdateUser(ctx, u); err != nil {
		t.Fatal(err)
	}
	conflict("user", c.do("PATCH", "/api/admin/users/"+uid, map[string]any{"rpm": 7, "version": uv}), "alice")
	if got, _ := e.store.GetUser(ctx, uid); got.RPM != 5 {
		t.Fatalf("rpm %d after the refused edit, want 5", got.RPM)
	}
	c.do("PATCH", "/api/admin/users/"+uid, map[string]any{"group": "g"}).want(t, 200)

	// An API key.
	kr := c.do("POST", "/api/admin/keys", map[string]any{"name": "app"}).want(t, 201)
	kid := kr.json["key"].(map[string]any)["id"].(string)
	kv := version(c.do("GET", "/api/admin/keys/"+kid, nil).want(t, 200))
	keys, err := e.store.ListAPIKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.ID == kid {
			k.Limits.RPM = 5
			if _, err := e.store.UpdateAPIKey(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
	}
	conflict("key", c.do("PATCH", "/api/admin/keys/"+kid, map[string]any{"limits": map[string]any{"rpm": 7}, "version": kv}), "app")
	r := c.do("PATCH", "/api/admin/keys/"+kid, map[string]any{"group": "g"}).want(t, 200)
	if r.json["limits"].(map[string]any)["rpm"].(float64) != 5 {
		t.Fatalf("key after the refused edit and a plain one: %s", r.body)
	}
}
