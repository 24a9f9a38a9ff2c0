package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/sqlite"
	"github.com/troupe-gw/troupe/upstream"
)

func jwtFor(accountID, email, plan string) string {
	p, _ := json.Marshal(map[string]any{"exp": time.Now().Add(time.Hour).Unix(), "email": email,
		"https://api.openai.com/auth": map[string]any{"chatgpt_account_id": accountID, "chatgpt_plan_type": plan}})
	return "eyJhbGciOiJub25lIn0." + base64.RawURLEncoding.EncodeToString(p) + ".sig"
}

func openSQLite(t *testing.T) (*sqlite.Store, string) {
	t.Helper()
	dir := t.TempDir()
	sealer, err := storage.NewSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "t.db")
	st, err := sqlite.Open(context.Background(), path, sealer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, path
}

func TestImportCodexAccountsEveryFormat(t *testing.T) {
	st, path := openSQLite(t)
	ctx := context.Background()
	if _, err := st.PutAccount(ctx, storage.Account{Name: "oai", Provider: storage.ProviderOpenAI, Credentials: storage.Credentials{APIKey: "sk-x"}}); err != nil {
		t.Fatal(err)
	}
	// auth.json of the Codex CLI.
	auth := fmt.Sprintf(`{"auth_mode":"chatgpt","OPENAI_API_KEY":null,"tokens":{"id_token":%q,"access_token":%q,"refresh_token":"rt_secret_1","account_id":"aaaaaaaa-0000-4000-8000-000000000001"},"last_refresh":"2026-09-24T10:15:30Z"}`,
		jwtFor("aaaaaaaa-0000-4000-8000-000000000001", "a@example.com", "pro"), jwtFor("aaaaaaaa-0000-4000-8000-000000000001", "a@example.com", "pro"))
	rep, err := ImportCodexAccounts(ctx, st, []byte(auth), ImportOptions{Models: []string{"gpt-5.4"}, MaxConcurrency: 3})
	if err != nil || rep.Counts["imported"] != 1 {
		t.Fatalf("auth.json: %v %+v", err, rep)
	}
	e := rep.Entries[0]
	if e.Name != "codex-aaaaaaaa" || e.Email != "a@example.com" || e.Plan != "pro" {
		t.Fatalf("auth.json entry %+v", e)
	}

	// JSON array: a duplicate, an update of the auth.json account, malformed entries.
	arr := `[
	  {"refresh_token":"rt_secret_2","account_id":"bbbbbbbb-1","email":"b@example.com","plan":"plus"},
	  {"refresh_token":"rt_secret_3","account_id":"bbbbbbbb-1"},
	  {"refresh_token":"rt_secret_4","account_id":"aaaaaaaa-0000-4000-8000-000000000001"},
	  {"email":"x@example.com"},
	  {"refresh_token":"rt_secret_5","proxy":"ftp://nope"},
	  17
	]`
	rep, err = ImportCodexAccounts(ctx, st, []byte(arr), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"imported", "refused", "updated", "refused", "refused", "refused"}
	for i, e := range rep.Entries {
		if e.Status != want[i] {
			t.Errorf("array entry %d: %+v, want %s", i+1, e, want[i])
		}
		if strings.Contains(e.Reason, "rt_secret") {
			t.Errorf("reason quotes a token: %q", e.Reason)
		}
	}
	if rep.Entries[1].Reason != "duplicate of entry 1" || rep.Entries[2].Name != "codex-aaaaaaaa" {
		t.Fatalf("array: %+v", rep.Entries)
	}
	// JSON lines and a token list; re-importing the same token is "unchanged".
	rep, err = ImportCodexAccounts(ctx, st, []byte("{\"refresh_token\":\"rt_secret_6\",\"account_id\":\"cccccccc\"}\n{broken\n"), ImportOptions{})
	if err != nil || rep.Counts["imported"] != 1 || rep.Counts["refused"] != 1 || rep.Entries[1].Line != 2 {
		t.Fatalf("jsonl: %v %+v", err, rep)
	}
	rep, err = ImportCodexAccounts(ctx, st, []byte("rt_secret_7\nrt_secret_7\nrt_secret_6\n"), ImportOptions{NamePrefix: "cx-"})
	if err != nil || rep.Entries[0].Status != "imported" || !strings.HasPrefix(rep.Entries[0].Name, "cx-rt") ||
		rep.Entries[1].Status != "refused" || rep.Entries[2].Status != "unchanged" || rep.Entries[2].Name != "codex-cccccccc" {
		t.Fatalf("tokens: %v %+v", err, rep.Entries)
	}
	// Dry run stores nothing.
	rep, _ = ImportCodexAccounts(ctx, st, []byte("rt_secret_8\n"), ImportOptions{DryRun: true})
	if rep.Counts["imported"] != 1 {
		t.Fatalf("dry run %+v", rep)
	}
	if _, err := ImportCodexAccounts(ctx, st, []byte("   "), ImportOptions{}); err == nil {
		t.Fatal("an empty file imported")
	}

	accs, _ := st.ListAccounts(ctx)
	var codex []storage.Account
	for _, a := range accs {
		if a.Provider == storage.ProviderCodex {
			codex = append(codex, a)
		}
	}
	if len(codex) != 4 {
		t.Fatalf("%d codex accounts stored, want 4", len(codex))
	}
	a, _ := st.GetAccount(ctx, "codex-aaaaaaaa")
	if a.Credentials.RefreshToken != "rt_secret_4" || a.MaxConcurrency != 3 || len(a.Models) != 1 {
		t.Fatalf("updated account %+v", a)
	}
	// Sealed at rest: no token in the database file.
	st.Close()
	for _, f := range []string{path, path + "-wal"} {
		raw, _ := os.ReadFile(f)
		if bytes.Contains(raw, []byte("rt_secret")) || bytes.Contains(raw, []byte("a@example.com")) {
			t.Fatalf("%s holds a secret in clear", f)
		}
	}
}

// importEnv opens a SQLite store, starts the actors over it and creates an
// admin key, whose secret it returns.
func importEnv(t *testing.T) (st *sqlite.Store, sys *actors.System, admin string) {
	t.Helper()
	st, _ = openSQLite(t)
	sys, err := actors.Start(actors.Config{Store: st, Transport: func(storage.Account) (upstream.Transport, error) { return cannedTransport{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Stop(context.Background()) })
	admin, k, _ := gateway.NewKey("admin")
	k.Admin = true
	if _, err := st.CreateAPIKey(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	return st, sys, admin
}

func TestAdminImportExportAPI(t *testing.T) {
	st, sys, admin := importEnv(t)
	plain, k2, _ := gateway.NewKey("plain")
	st.CreateAPIKey(context.Background(), k2)
	// do() runs handlers on a bare RequestCtx, which cannot be a parent
	// context; the wrapper gives the store a real one.
	s := mounted(sys, bgStore{st})

	body := []byte("{\"refresh_token\":\"rt_api_1\",\"account_id\":\"dddddddd-1\",\"email\":\"d@example.com\"}\n{\"refresh_token\":\"rt_api_2\",\"account_id\":\"eeeeeeee-1\"}\n")
	if r := do(s, "POST", "/api/admin/accounts/import", plain, body); r.StatusCode() != 403 {
		t.Fatalf("non-admin key: %d", r.StatusCode())
	}
	if r := do(s, "POST", "/api/admin/accounts/import", "", body); r.StatusCode() != 401 {
		t.Fatalf("no key: %d", r.StatusCode())
	}
	r := do(s, "POST", "/api/admin/accounts/import?max_concurrency=2&models=gpt-5.4", admin, body)
	if r.StatusCode() != 200 || gjson.GetBytes(r.Body(), "counts.imported").Int() != 2 || bytes.Contains(r.Body(), []byte("rt_api")) {
		t.Fatalf("import: %d %s", r.StatusCode(), r.Body())
	}
	if r := do(s, "POST", "/api/admin/accounts/import", admin, []byte("[1,")); r.StatusCode() != 400 || !isOpenAIError(r.Body()) {
		t.Fatalf("broken file: %d %s", r.StatusCode(), r.Body())
	}
	if r := do(s, "POST", "/api/admin/accounts/import?max_concurrency=x", admin, body); r.StatusCode() != 400 {
		t.Fatalf("bad option: %d", r.StatusCode())
	}
	if r := do(s, "GET", "/api/admin/accounts/import", admin, nil); r.StatusCode() != 405 {
		t.Fatalf("GET import: %d", r.StatusCode())
	}
	for _, f := range []string{"jsonl", "json", "auth.json", "tokens"} {
		r := do(s, "GET", "/api/admin/accounts/export?format="+f, admin, nil)
		if r.StatusCode() != 200 || string(r.Header.Peek("Cache-Control")) != "no-store" {
			t.Fatalf("export %s: %d", f, r.StatusCode())
		}
		es, err := upstream.ParseCodexFile(r.Body())
		if err != nil || len(es) != 2 || es[0].Credentials.RefreshToken != "rt_api_1" {
			t.Fatalf("export %s: %v %+v", f, err, es)
		}
	}
	r = do(s, "GET", "/api/admin/accounts/export?format=jsonl&name=codex-dddddddd", admin, nil)
	if es, _ := upstream.ParseCodexFile(r.Body()); len(es) != 1 || es[0].Credentials.Email != "d@example.com" {
		t.Fatalf("export by name: %s", r.Body())
	}
	if r := do(s, "GET", "/api/admin/accounts/export?format=xml", admin, nil); r.StatusCode() != 400 {
		t.Fatalf("bad format: %d", r.StatusCode())
	}
}

// bgStore runs the store's calls under context.Background().
type bgStore struct{ *sqlite.Store }

func (b bgStore) APIKeyByHash(_ context.Context, h string) (storage.APIKey, error) {
	return b.Store.APIKeyByHash(context.Background(), h)
}

func (b bgStore) ListAccounts(context.Context) ([]storage.Account, error) {
	return b.Store.ListAccounts(context.Background())
}

func (b bgStore) PutAccount(_ context.Context, a storage.Account) (storage.Account, error) {
	return b.Store.PutAccount(context.Background(), a)
}

// Bad import and account bodies are refused in the body's terms: an unknown
// format is a 400 (it was read as a Codex file, imported nothing and answered
// 200), and a wrongly typed field is named with its JSON type, never with Go
// type names such as gateway.accountInput.
func TestAdminImportRefusalsSpeakJSON(t *testing.T) {
	st, sys, admin := importEnv(t)
	s := mounted(sys, bgStore{st})
	r := do(s, "POST", "/api/admin/accounts/import?format=zzz", admin, []byte(`[]`))
	if r.StatusCode() != 400 || gjson.GetBytes(r.Body(), "error.param").Str != "format" {
		t.Fatalf("unknown format: %d %s", r.StatusCode(), r.Body())
	}
	r = do(s, "POST", "/api/admin/accounts/import?format=tokens&base_url=file:///etc/passwd", admin, []byte("rt_abcdef123\n"))
	if r.StatusCode() != 400 || gjson.GetBytes(r.Body(), "error.param").Str != "base_url" {
		t.Fatalf("import with a file: base_url: %d %s", r.StatusCode(), r.Body())
	}
	for _, tc := range []struct{ path, method, body, want string }{
		{"/api/admin/accounts/import?format=troupe", "POST", `[{"name":5}]`, "name must be a string, not number"},
		{"/api/admin/accounts/import?format=troupe", "POST", `{"accounts":"x"}`, "accounts must be an array, not string"},
		{"/api/admin/accounts/import?format=troupe", "POST", `[{"name":"a"},`, "invalid JSON at byte 14"},
		{"/api/admin/accounts", "POST", `{"name":"a","max_concurrency":"9"}`, "max_concurrency must be an integer, not string"},
		{"/api/admin/accounts", "POST", `{"name":"a","zzz":1}`, `unknown field "zzz"`},
		{"/api/admin/keys", "POST", `{"name":["a"]}`, "name must be a string, not array"},
	} {
		r := do(s, tc.method, tc.path, admin, []byte(tc.body))
		msg := gjson.GetBytes(r.Body(), "error.message").Str
		if r.StatusCode() != 400 || !strings.Contains(msg, tc.want) {
			t.Errorf("%s %s: %d %s, want %q", tc.path, tc.body, r.StatusCode(), r.Body(), tc.want)
		}
		if strings.Contains(msg, "Go ") || strings.Contains(msg, "gateway.") || strings.Contains(msg, "json:") {
			t.Errorf("%s %s: Go error text in %s", tc.path, tc.body, msg)
		}
	}
}
