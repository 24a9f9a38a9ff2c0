package main

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/bench/codexmock"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/cachetest"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// startCodexApp starts a gateway whose codex OAuth endpoint is the mock's.
func startCodexApp(t *testing.T, cfg *Config) *app {
	t.Helper()
	logs := &syncBuffer{}
	a, err := startApp(t.Context(), cfg, newLogger(cfg, logs))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	a.serve()
	t.Cleanup(func() {
		if err := a.shutdown(10 * time.Second); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if t.Failed() {
			t.Logf("gateway log:\n%s", logs.String())
		}
	})
	waitHealthy(t, a)
	return a
}

func gatewayDo(t *testing.T, a *app, method, path, key, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, strings.TrimSuffix(a.baseURL(), "/v1")+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, []byte(b.String())
}

// TestCodexImportRefreshAndWindows: refresh tokens imported through the
// admin API become working accounts (each refreshes once to get an access
// token), serve /v1/responses through the mock backend's header checks,
// and their usage windows show in the ops view.
func TestCodexImportRefreshAndWindows(t *testing.T) {
	clearTroupeEnv(t)
	m, err := codexmock.Start(codexmock.Config{UsedPerRequest: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rt1 := m.AddAccount(codexmock.Account{ID: "11111111-0000-4000-8000-000000000001", Email: "a@example.com", Plan: "plus"})
	rt2 := m.AddAccount(codexmock.Account{ID: "22222222-0000-4000-8000-000000000002", Email: "b@example.com", Plan: "pro"})
	cfg := testConfig(t)
	cfg.Codex.OAuthTokenURL = m.TokenURL()
	cfg.Aliases = map[string]string{"codex-latest": "gpt-5.4"}
	a := startCodexApp(t, cfg)
	admin, _ := createKey(t, a.store, "admin", func(k *storage.APIKey) { k.Admin = true })

	st, body := gatewayDo(t, a, "POST", "/api/admin/accounts/import?base_url="+m.BaseURL(), admin,
		"# two logins\n"+rt1+"\n"+rt2+"\n"+rt1+"\nnot a token\n")
	if st != 200 || gjson.GetBytes(body, "counts.imported").Int() != 2 || gjson.GetBytes(body, "counts.refused").Int() != 2 {
		t.Fatalf("import: %d %s", st, body)
	}
	if strings.Contains(string(body), rt1) {
		t.Fatal("the import report quotes a refresh token")
	}
	eventually(t, 15*time.Second, "imported accounts active", func() (bool, string) {
		active := 0
		for _, v := range a.sys.Views() {
			if v.Status == actors.StatusActive {
				active++
			}
		}
		return active == 2, strconv.Itoa(active) + " active"
	})
	for i := range 4 {
		st, b := gatewayDo(t, a, "POST", "/v1/responses", admin, `{"model":"gpt-5.4","input":"hi `+strconv.Itoa(i)+`"}`)
		if st != 200 || !strings.Contains(gjson.GetBytes(b, "output.0.content.0.text").Str, "Hello from") {
			t.Fatalf("request %d: %d %s", i, st, b)
		}
	}
	eventually(t, 5*time.Second, "usage windows in the ops view", func() (bool, string) {
		_, b := gatewayDo(t, a, "GET", "/api/admin/ops", admin, "")
		n := gjson.GetBytes(b, "usage_windows.by_name.5h.accounts").Int()
		return n >= 1, string(b) // the policy may have sent every request to one account
	})
	if g, refused := m.Grants(); g != 2 || refused != 0 {
		t.Fatalf("refresh grants %d, refused %d", g, refused)
	}
	// The rotated tokens are stored (sealed) and export reads them back.
	_, exp := gatewayDo(t, a, "GET", "/api/admin/accounts/export?format=tokens", admin, "")
	if lines := strings.Fields(string(exp)); len(lines) != 2 || strings.Contains(string(exp), rt1) || strings.Contains(string(exp), rt2) {
		t.Fatalf("export after refresh: %q", exp)
	}
	// The models catalog: the backend's list per plan, aliases included, in /v1/models.
	a.refreshCatalogOnce(t.Context())
	_, models := gatewayDo(t, a, "GET", "/v1/models", admin, "")
	if !strings.Contains(string(models), `"gpt-5.4"`) || !strings.Contains(string(models), `"codex-latest"`) {
		t.Fatalf("/v1/models: %s", models)
	}
	for _, r := range m.Requests() {
		if r.Header.Get("Session-Id") == "" || !strings.Contains(string(r.Body), "x-codex-installation-id") {
			t.Fatalf("upstream request without a codex identity: %v %s", r.Header, r.Body)
		}
	}
}

// TestCodexRefreshAcrossInstances: two gateways on one PostgreSQL database
// and one Redis start with the same expired access token; the refresh lease
// in Redis lets exactly one of them spend the single-use refresh token, and
// the other adopts the stored result. Both then serve.
func TestCodexRefreshAcrossInstances(t *testing.T) {
	clearTroupeEnv(t)
	rurl := cachetest.RedisURL(t)
	m, err := codexmock.Start(codexmock.Config{RefreshDelay: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const id = "33333333-0000-4000-8000-000000000003"
	rt := m.AddAccount(codexmock.Account{ID: id, Plan: "plus"})
	expired, _ := m.IssueAccess(id, -time.Minute)
	cfg := testConfig(t)
	cfg.Storage.Driver, cfg.Storage.DSN = "postgres", storagetest.PostgresDB(t)
	cfg.Storage.MasterKey = newMasterKey(t)
	cfg.Cache.Driver, cfg.Cache.URL, cfg.Cache.Prefix = "redis", redisURL(t, rurl), cachetest.RedisPrefix(t, rurl)
	cfg.Codex.OAuthTokenURL = m.TokenURL()
	putAccounts(t, cfg, storage.Account{Name: "cx", Provider: storage.ProviderCodex, BaseURL: m.BaseURL(), Models: []string{"gpt-5.4"},
		MaxConcurrency: 4, Credentials: storage.Credentials{RefreshToken: rt, AccessToken: expired, AccountID: id}})
	var apps [2]*app
	var wg sync.WaitGroup
	for i := range apps {
		c := *cfg
		c.DataDir = t.TempDir()
		wg.Go(func() { apps[i] = startCodexApp(t, &c) })
	}
	wg.Wait()
	secret, _ := createKey(t, apps[0].store, "k", nil)
	for i, a := range apps {
		eventually(t, 15*time.Second, "instance "+strconv.Itoa(i)+" serves", func() (bool, string) {
			st, b := gatewayDo(t, a, "POST", "/v1/responses", secret, `{"model":"gpt-5.4","input":"hi"}`)
			return st == 200, strconv.Itoa(st) + " " + string(b)
		})
	}
	if g, refused := m.Grants(); g != 1 || refused != 0 {
		t.Fatalf("refresh grants %d, refused %d: both instances spent the refresh token", g, refused)
	}
}

// TestCatalogWantedOnlyWithCodex: the models catalog's refresh, which reads
// every account to find the codex ones, is skipped by a pool of one
// instance that holds no codex account, and runs when it holds one.
func TestCatalogWantedOnlyWithCodex(t *testing.T) {
	openai := startTestDemo(t, nil, tuned(span(2, 6, 2), nil))
	if openai.app.catalogWanted() {
		t.Errorf("catalogWanted with OpenAI accounts only: true")
	}
	mixed := startTestDemo(t, nil, tuned(span(1, 2, 1), nil))
	if !mixed.app.catalogWanted() {
		t.Errorf("catalogWanted with a codex account: false")
	}
}
