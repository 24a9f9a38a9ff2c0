package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// environ returns an environ func for loadConfig.
func environ(kv ...string) func() []string { return func() []string { return kv } }

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigDefaults(t *testing.T) {
	c, err := loadConfig("", environ())
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	checks := []struct {
		key       string
		got, want any
	}{
		{"listen", c.Listen, "127.0.0.1:8080"},
		{"data_dir", c.DataDir, "./data"},
		{"log.level", c.Log.Level, "info"},
		{"log.format", c.Log.Format, "text"},
		{"storage.driver", c.Storage.Driver, "sqlite"},
		{"storage.dsn", c.Storage.DSN, ""},
		{"storage.master_key", c.Storage.MasterKey, ""},
		{"gateway.max_body_bytes", c.Gateway.MaxBodyBytes, 16 << 20},
		{"gateway.max_attempts", c.Gateway.MaxAttempts, 3},
		{"gateway.max_wait", c.Gateway.MaxWait, 10 * time.Second},
		{"gateway.request_timeout", c.Gateway.RequestTimeout, 10 * time.Minute},
		{"gateway.header_timeout", c.Gateway.HeaderTimeout, time.Duration(0)},
		{"cache.driver", c.Cache.Driver, "memory"},
		{"cache.prefix", c.Cache.Prefix, "troupe:"},
		{"gateway.nonstream_timeout", c.Gateway.NonStreamTimeout, 5 * time.Minute},
		{"aliases", len(c.Aliases), 0},
		{"accounts", len(c.Accounts), 0},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.key, ch.got, ch.want)
		}
	}
}

const fullYAML = `
listen: 127.0.0.1:9999
data_dir: /var/lib/troupe
log: {level: debug, format: json}
storage:
  driver: sqlite
  dsn: /tmp/x.db
  master_key: "0000000000000000000000000000000000000000000000000000000000000000"
gateway:
  max_body_bytes: 1048576
  max_attempts: 5
  max_wait: 2s
  request_timeout: 90s
  header_timeout: 15s
aliases:
  fast: gpt-4.1-mini
  smart: gpt-5.5
accounts:
  - name: oai-1
    provider: openai
    base_url: https://api.openai.com/v1
    api_key: sk-file-key
    models: [gpt-4.1-mini, gpt-4.1]
    max_concurrency: 8
    group: team-a
    tags: [paid, fast]
    priority: 2
  - name: cx-1
    provider: codex
    credentials: {access_token: eyJ.token, refresh_token: rt-1, account_id: 0000-1111}
    models: [gpt-5.5]
    disabled: true
`

func TestConfigFile(t *testing.T) {
	c, err := loadConfig(writeFile(t, "troupe.yaml", fullYAML), environ())
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if c.Listen != "127.0.0.1:9999" || c.DataDir != "/var/lib/troupe" || c.Log.Level != "debug" || c.Log.Format != "json" {
		t.Errorf("top level: %+v", c)
	}
	if c.Storage.DSN != "/tmp/x.db" || len(c.Storage.MasterKey) != 64 {
		t.Errorf("storage: %+v", c.Storage)
	}
	g := c.Gateway
	if g.MaxBodyBytes != 1<<20 || g.MaxAttempts != 5 || g.MaxWait != 2*time.Second || g.RequestTimeout != 90*time.Second || g.HeaderTimeout != 15*time.Second {
		t.Errorf("gateway: %+v", g)
	}
	if !reflect.DeepEqual(c.Aliases, map[string]string{"fast": "gpt-4.1-mini", "smart": "gpt-5.5"}) {
		t.Errorf("aliases: %v", c.Aliases)
	}
	if len(c.Accounts) != 2 {
		t.Fatalf("accounts: %+v", c.Accounts)
	}
	o := c.Accounts[0].account()
	want := storage.Account{Name: "oai-1", Provider: storage.ProviderOpenAI, BaseURL: "https://api.openai.com/v1",
		Credentials: storage.Credentials{APIKey: "sk-file-key"}, Models: []string{"gpt-4.1-mini", "gpt-4.1"},
		MaxConcurrency: 8, Group: "team-a", Tags: []string{"paid", "fast"}, Priority: 2}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("account 0:\n got %+v\nwant %+v", o, want)
	}
	x := c.Accounts[1].account()
	if x.Provider != storage.ProviderCodex || !x.Disabled || x.Credentials.AccessToken != "eyJ.token" ||
		x.Credentials.RefreshToken != "rt-1" || x.Credentials.AccountID != "0000-1111" || !slices.Equal(x.Models, []string{"gpt-5.5"}) {
		t.Errorf("account 1: %+v", x)
	}
}

func TestConfigEnvOverrides(t *testing.T) {
	path := writeFile(t, "troupe.yaml", fullYAML)
	c, err := loadConfig(path, environ(
		"TROUPE_LISTEN=0.0.0.0:7000",
		"TROUPE_DATA_DIR=/srv/troupe",
		"TROUPE_LOG_LEVEL=warn",
		"TROUPE_LOG_FORMAT=text",
		"TROUPE_STORAGE_DSN=/srv/troupe/t.db",
		"TROUPE_GATEWAY_MAX_WAIT=250ms",
		"TROUPE_GATEWAY_MAX_BODY_BYTES=2048",
		"TROUPE_GATEWAY_MAX_ATTEMPTS=1",
		// Not config keys: ignored, not errors (make test sets the first two).
		"TROUPE_CODEX_BIN=/x/codex",
		"TROUPE_REQUIRE_CLIENTS=1",
		"TROUPE_ACCOUNTS=oops",
		"TROUPE_ALIASES=oops",
		"LISTEN=1.2.3.4:1",
		"troupe_listen=1.2.3.4:2",
	))
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if c.Listen != "0.0.0.0:7000" || c.DataDir != "/srv/troupe" || c.Log.Level != "warn" || c.Log.Format != "text" || c.Storage.DSN != "/srv/troupe/t.db" {
		t.Errorf("env did not override the file: %+v", c)
	}
	if c.Gateway.MaxWait != 250*time.Millisecond || c.Gateway.MaxBodyBytes != 2048 || c.Gateway.MaxAttempts != 1 {
		t.Errorf("gateway: %+v", c.Gateway)
	}
	// Untouched file values survive.
	if c.Gateway.HeaderTimeout != 15*time.Second || len(c.Accounts) != 2 || c.Aliases["fast"] != "gpt-4.1-mini" {
		t.Errorf("file values lost: %+v", c)
	}

	// Env over defaults, without a file.
	c, err = loadConfig("", environ("TROUPE_STORAGE_DRIVER=sqlite", "TROUPE_GATEWAY_HEADER_TIMEOUT=5s"))
	if err != nil || c.Gateway.HeaderTimeout != 5*time.Second {
		t.Errorf("env over defaults: %v, %+v", err, c)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		yaml string // "" means no file
		env  []string
		want []string // substrings of the error
	}{
		{name: "bad provider", yaml: "accounts: [{name: a, provider: azure}]", want: []string{"accounts[0]", `provider "azure"`}},
		{name: "missing provider", yaml: "accounts: [{name: a}]", want: []string{"accounts[0]", "provider"}},
		{name: "duplicate account name", yaml: "accounts: [{name: a, provider: openai}, {name: b, provider: openai}, {name: a, provider: codex}]",
			want: []string{"accounts[2]", `duplicate name "a"`}},
		{name: "missing account name", yaml: "accounts: [{provider: openai}]", want: []string{"accounts[0]", "name is required"}},
		{name: "bad log level", yaml: "log: {level: verbose}", want: []string{`log.level "verbose"`}},
		{name: "bad log level from env", env: []string{"TROUPE_LOG_LEVEL=trace"}, want: []string{`log.level "trace"`}},
		{name: "bad storage driver", env: []string{"TROUPE_STORAGE_DRIVER=mysql"}, want: []string{`storage.driver "mysql"`}},
		{name: "postgres without dsn", env: []string{"TROUPE_STORAGE_DRIVER=postgres"}, want: []string{"storage.dsn"}},
		{name: "bad cache driver", env: []string{"TROUPE_CACHE_DRIVER=memcached"}, want: []string{`cache.driver "memcached"`}},
		{name: "redis without url", env: []string{"TROUPE_CACHE_DRIVER=redis"}, want: []string{"cache.url"}},
		{name: "empty listen", yaml: `listen: ""`, want: []string{"listen"}},
		{name: "bad duration", yaml: "gateway: {max_wait: soon}", want: []string{"config"}},
		{name: "bad duration from env", env: []string{"TROUPE_GATEWAY_MAX_WAIT=forever"}, want: []string{"config"}},
		{name: "malformed YAML", yaml: "listen: [unclosed", want: []string{"config file"}},
		{name: "bad hygiene action", env: []string{"TROUPE_HYGIENE_ACTION=ban"}, want: []string{`hygiene.action "ban"`}},
		{name: "bad tracing protocol", env: []string{"TROUPE_TRACING_PROTOCOL=thrift"}, want: []string{`tracing.protocol "thrift"`}},
		{name: "bad sample ratio", yaml: "tracing: {sample_ratio: 2}", want: []string{"tracing.sample_ratio"}},
		{name: "negative request timeout", yaml: "gateway: {request_timeout: -5s}", want: []string{"gateway.request_timeout -5s"}},
		{name: "negative sizes", yaml: "gateway: {max_body_bytes: -1, hold_buffer_bytes: -2, websocket: {max_message_bytes: -3}}",
			want: []string{"gateway.max_body_bytes -1", "gateway.hold_buffer_bytes -2", "gateway.websocket.max_message_bytes -3"}},
		{name: "negative duration from env", env: []string{"TROUPE_GATEWAY_FAILOVER_BUDGET=-1m"}, want: []string{"gateway.failover_budget -1m0s"}},
		{name: "several at once", yaml: "log: {level: loud}\naccounts: [{name: a, provider: x}]",
			want: []string{`log.level "loud"`, `provider "x"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.yaml != "" {
				path = writeFile(t, "troupe.yaml", tc.yaml)
			}
			_, err := loadConfig(path, environ(tc.env...))
			if err == nil {
				t.Fatalf("loadConfig succeeded, want an error mentioning %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := loadConfig(filepath.Join(t.TempDir(), "nope.yaml"), environ())
		if err == nil || !strings.Contains(err.Error(), "config file") {
			t.Errorf("err = %v, want a config file error", err)
		}
	})
	t.Run("secrets stay out of errors", func(t *testing.T) {
		_, err := loadConfig(writeFile(t, "t.yaml", "accounts: [{name: a, provider: bogus, api_key: sk-very-secret}]"), environ())
		if err == nil || strings.Contains(err.Error(), "sk-very-secret") {
			t.Errorf("err = %v: want an error without the api key", err)
		}
	})
}

// TestConfigFlagsOverride checks the last layer: --listen and --data win over
// the environment.
func TestConfigFlagsOverride(t *testing.T) {
	t.Setenv("TROUPE_LISTEN", "127.0.0.1:1111")
	t.Setenv("TROUPE_DATA_DIR", "/from/env")
	cmd := serveCmd()
	if err := cmd.ParseFlags([]string{"--listen", "127.0.0.1:2222"}); err != nil {
		t.Fatal(err)
	}
	c, err := configFrom(cmd)
	if err != nil {
		t.Fatalf("configFrom: %v", err)
	}
	if c.Listen != "127.0.0.1:2222" || c.DataDir != "/from/env" {
		t.Errorf("listen %q data %q: want the flag's listen and the env's data dir", c.Listen, c.DataDir)
	}
}

// TestDeclaredAccountsUpserted starts the app twice on one data dir: declared
// accounts are stored (credentials included) and join the pool; a changed
// declaration updates the stored account by name instead of adding one.
func TestDeclaredAccountsUpserted(t *testing.T) {
	cfg := testConfig(t)
	cfg.Accounts = []AccountConfig{
		{Name: "oai-1", Provider: "openai", BaseURL: "http://127.0.0.1:1/v1", APIKey: "sk-declared-1",
			Models: []string{"gpt-4.1-mini"}, MaxConcurrency: 3, Tags: []string{"paid"}},
		{Name: "cx-1", Provider: "codex", BaseURL: "http://127.0.0.1:1/backend-api/codex",
			Credentials: storage.Credentials{AccessToken: "eyJ.declared", AccountID: "acc-1"}, Models: []string{"gpt-5.5"}},
	}
	run := func(cfg *Config) []storage.Account {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a, err := startApp(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatalf("startApp: %v", err)
		}
		a.serve()
		stopped := false
		defer func() {
			if !stopped {
				_ = a.shutdown(5 * time.Second)
			}
		}()
		waitHealthy(t, a)
		eventually(t, 10*time.Second, "declared accounts in the pool", func() (bool, string) {
			var names []string
			for _, v := range a.sys.Views() {
				names = append(names, v.Name)
			}
			slices.Sort(names)
			return slices.Equal(names, []string{"cx-1", "oai-1"}), strings.Join(names, ",")
		})
		accs, err := a.store.ListAccounts(ctx)
		if err != nil {
			t.Fatalf("ListAccounts: %v", err)
		}
		stopped = true
		if err := a.shutdown(5 * time.Second); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		return accs
	}

	first := run(cfg)
	byName := map[string]storage.Account{}
	for _, a := range first {
		byName[a.Name] = a
	}
	o, x := byName["oai-1"], byName["cx-1"]
	if len(first) != 2 || o.ID == "" || x.ID == "" {
		t.Fatalf("stored accounts: %+v", first)
	}
	if o.Provider != storage.ProviderOpenAI || o.Credentials.APIKey != "sk-declared-1" || o.MaxConcurrency != 3 || !slices.Equal(o.Tags, []string{"paid"}) {
		t.Errorf("oai-1 stored as %+v", o)
	}
	if x.Provider != storage.ProviderCodex || x.Credentials.AccessToken != "eyJ.declared" || x.Credentials.AccountID != "acc-1" {
		t.Errorf("cx-1 stored as %+v", x)
	}

	cfg.Accounts[0].MaxConcurrency = 7
	cfg.Accounts[0].APIKey = "sk-declared-2"
	second := run(cfg)
	if len(second) != 2 {
		t.Fatalf("after restart %d accounts, want 2 (upsert by name): %+v", len(second), second)
	}
	for _, a := range second {
		if a.Name == "oai-1" {
			if a.ID != o.ID || a.MaxConcurrency != 7 || a.Credentials.APIKey != "sk-declared-2" {
				t.Errorf("oai-1 after restart: %+v (id was %s)", a, o.ID)
			}
		}
	}
}

// waitHealthy waits until the app answers /healthz, so it is serving.
func waitHealthy(t *testing.T, a *app) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	eventually(t, 10*time.Second, "gateway /healthz", func() (bool, string) {
		resp, err := c.Get("http://" + a.addr() + "/healthz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
}
