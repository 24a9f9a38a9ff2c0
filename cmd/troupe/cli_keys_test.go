package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/bench/mock"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
)

// newMasterKey returns a fresh master key in base64, as operators make them
// (head -c 32 /dev/urandom | base64).
func newMasterKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, storage.KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k)
}

// configFile writes the storage and cache part of cfg as a YAML file for
// the CLI (-c FILE) and returns its path.
func configFile(t *testing.T, cfg *Config) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "data_dir: %q\nlog: {level: warn}\n", cfg.DataDir)
	fmt.Fprintf(&b, "storage:\n  driver: %q\n  dsn: %q\n  master_key: %q\n", cfg.Storage.Driver, cfg.Storage.DSN, cfg.Storage.MasterKey)
	if len(cfg.Storage.PreviousMasterKeys) > 0 {
		b.WriteString("  previous_master_keys:\n")
		for _, k := range cfg.Storage.PreviousMasterKeys {
			fmt.Fprintf(&b, "    - %q\n", k)
		}
	}
	fmt.Fprintf(&b, "cache:\n  driver: %q\n  url: %q\n  prefix: %q\n", cfg.Cache.Driver, cfg.Cache.URL, cfg.Cache.Prefix)
	p := filepath.Join(t.TempDir(), "troupe.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// keyLine returns the fields of name's line in keys list output: NAME PREFIX
// GROUP MODELS RPM RPD TOKENS/DAY EXPIRES STATE ADMIN CREATED.
func keyLine(t *testing.T, list, name string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) == 0 || !slices.Equal(strings.Fields(lines[0]), strings.Fields(strings.ReplaceAll(keyHeader, "\t", " "))) {
		t.Fatalf("keys list header: %q", list)
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			if len(f) != 11 {
				t.Fatalf("keys list line of %s has %d fields, want 11: %q", name, len(f), l)
			}
			return f
		}
	}
	t.Fatalf("key %s not listed:\n%s", name, list)
	return nil
}

// TestCLIKeyLimits drives keys create with every limit flag, keys list's
// limit and state columns, and keys update, which changes only the fields
// whose flags are given.
func TestCLIKeyLimits(t *testing.T) {
	clearTroupeEnv(t)
	dir := filepath.Join(t.TempDir(), "data")
	cli := func(args ...string) string { t.Helper(); return mustCLI(t, append(args, "--data", dir)...) }
	fails := func(want string, args ...string) {
		t.Helper()
		_, _, err := runCLI(t, append(args, "--data", dir)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("troupe %s: err = %v, want one mentioning %q", strings.Join(args, " "), err, want)
		}
	}

	before := time.Now()
	secret := strings.TrimSpace(cli("keys", "create", "--name", "batch", "--rpm", "60", "--rpd", "10000",
		"--tokens-per-day", "2000000", "--expires", "720h", "--models", "gpt-4.1-mini,gpt-5.5", "--group", "team-b"))
	if !strings.HasPrefix(secret, "sk-troupe-") {
		t.Fatalf("keys create printed %q", secret)
	}
	cli("keys", "create", "--name", "plain")
	cli("keys", "create", "--name", "off", "--disabled")
	cli("keys", "create", "--name", "old", "--expires", "2020-01-01T00:00:00Z")
	fails(`a key named "plain" already exists`, "keys", "create", "--name", "plain")

	list := cli("keys", "list")
	if strings.Contains(list, secret) {
		t.Fatalf("keys list prints a secret:\n%s", list)
	}
	f := keyLine(t, list, "batch")
	if got := strings.Join(f[2:7], " "); got != "team-b gpt-4.1-mini,gpt-5.5 60 10000 2000000" {
		t.Errorf("batch: group, models and limits listed as %q", got)
	}
	exp, err := time.Parse(time.RFC3339, f[7])
	if want := before.Add(720 * time.Hour); err != nil || exp.Before(want.Add(-time.Second)) || exp.After(time.Now().Add(720*time.Hour)) {
		t.Errorf("batch: expiry %q, want 720h from now (%v)", f[7], want.UTC().Format(time.RFC3339))
	}
	if f[8] != "enabled" {
		t.Errorf("batch: state %q", f[8])
	}
	if got := strings.Join(keyLine(t, list, "plain")[2:10], " "); got != "- * - - - never enabled no" {
		t.Errorf("plain: listed as %q", got)
	}
	if st := keyLine(t, list, "off")[8]; st != "disabled" {
		t.Errorf("off: state %q, want disabled", st)
	}
	if st := keyLine(t, list, "old")[8]; st != "expired" {
		t.Errorf("old: state %q, want expired", st)
	}

	// update changes what it is given and keeps the rest.
	out := cli("keys", "update", "batch", "--rpm", "120", "--tokens-per-day", "0", "--disable")
	if got := strings.Join(keyLine(t, out, "batch")[2:9], " "); got != "team-b gpt-4.1-mini,gpt-5.5 120 10000 - "+f[7]+" disabled" {
		t.Errorf("keys update printed %q", got)
	}
	cli("keys", "update", "batch", "--enable", "--models", "", "--expires", "never", "--group", "", "--name", "batch-2")
	list = cli("keys", "list")
	if got := strings.Join(keyLine(t, list, "batch-2")[1:9], " "); got != secret[:len("sk-troupe-")+4]+"… - * 120 10000 - never enabled" {
		t.Errorf("after the second update: %q", got)
	}
	cli("keys", "update", "old", "--expires", "1h")
	if st := keyLine(t, cli("keys", "list"), "old")[8]; st != "enabled" {
		t.Errorf("old after --expires 1h: state %q, want enabled", st)
	}

	fails("nothing to update", "keys", "update", "plain")
	fails("mutually exclusive", "keys", "update", "plain", "--disable", "--enable")
	fails("not found", "keys", "update", "nope", "--rpm", "1")
	fails("negative", "keys", "update", "plain", "--rpm", "-1")
	fails("negative", "keys", "create", "--name", "neg", "--rpd", "-5")
	fails("--expires", "keys", "create", "--name", "bad-exp", "--expires", "tomorrow")
	fails("positive", "keys", "create", "--name", "past", "--expires", "-1h")
	fails("conflict", "keys", "update", "plain", "--name", "off")
	if l := cli("keys", "list"); strings.Contains(l, "neg") || strings.Contains(l, "bad-exp") || strings.Contains(l, "past") {
		t.Errorf("a refused key was created:\n%s", l)
	}
}

// TestCLIKeyAdmin drives the admin right through the CLI: keys create
// --admin, the ADMIN column of keys list and of keys update's output, and
// keys update --admin/--no-admin, which grant and revoke it and leave every
// other field alone (and other flags leave the right alone).
func TestCLIKeyAdmin(t *testing.T) {
	clearTroupeEnv(t)
	dir := filepath.Join(t.TempDir(), "data")
	cli := func(args ...string) string { t.Helper(); return mustCLI(t, append(args, "--data", dir)...) }
	fails := func(want string, args ...string) {
		t.Helper()
		_, _, err := runCLI(t, append(args, "--data", dir)...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("troupe %s: err = %v, want one mentioning %q", strings.Join(args, " "), err, want)
		}
	}
	admin := func(list, name string) string { t.Helper(); return keyLine(t, list, name)[9] }

	cli("keys", "create", "--name", "ops", "--admin", "--rpm", "30")
	cli("keys", "create", "--name", "app", "--group", "team-a")
	list := cli("keys", "list")
	if a := admin(list, "ops"); a != "yes" {
		t.Errorf("ops created with --admin: ADMIN %q, want yes", a)
	}
	if a := admin(list, "app"); a != "no" {
		t.Errorf("app created without --admin: ADMIN %q, want no", a)
	}
	if got := strings.Join(keyLine(t, list, "ops")[2:9], " "); got != "- * 30 - - never enabled" {
		t.Errorf("ops: other fields listed as %q", got)
	}

	// Granting: keys update prints the row with the new right; the rest stays.
	out := cli("keys", "update", "app", "--admin")
	if f := keyLine(t, out, "app"); f[9] != "yes" || strings.Join(f[2:9], " ") != "team-a * - - - never enabled" {
		t.Errorf("keys update app --admin printed %q", f)
	}
	// Other flags keep the right as it is.
	cli("keys", "update", "app", "--rpm", "5", "--disable")
	list = cli("keys", "list")
	if f := keyLine(t, list, "app"); f[9] != "yes" || f[4] != "5" || f[8] != "disabled" {
		t.Errorf("app after --rpm 5 --disable: %q, want still admin", f)
	}
	// Revoking.
	out = cli("keys", "update", "ops", "--no-admin")
	if f := keyLine(t, out, "ops"); f[9] != "no" || f[4] != "30" {
		t.Errorf("keys update ops --no-admin printed %q", f)
	}
	list = cli("keys", "list")
	if a, b := admin(list, "ops"), admin(list, "app"); a != "no" || b != "yes" {
		t.Errorf("after granting app and revoking ops: ADMIN ops %q, app %q; want no, yes", a, b)
	}
	// Idempotent: granting an admin key again keeps it admin.
	if f := keyLine(t, cli("keys", "update", "app", "--admin", "--enable"), "app"); f[9] != "yes" || f[8] != "enabled" {
		t.Errorf("keys update app --admin --enable printed %q", f)
	}

	fails("mutually exclusive", "keys", "update", "app", "--admin", "--no-admin")
	fails("--no-admin", "keys", "update", "app")
	fails("unknown flag", "keys", "create", "--name", "x", "--no-admin")
	if a := admin(cli("keys", "list"), "app"); a != "yes" {
		t.Errorf("a refused update changed the admin right: ADMIN %q", a)
	}
}

// TestConfigPreviousMasterKeys checks storage.previous_master_keys from the
// file and from TROUPE_STORAGE_PREVIOUS_MASTER_KEYS (a comma-separated list).
func TestConfigPreviousMasterKeys(t *testing.T) {
	a, b := newMasterKey(t), newMasterKey(t)
	c, err := loadConfig(writeFile(t, "t.yaml", "storage: {previous_master_keys: ["+a+", "+b+"]}"), environ())
	if err != nil || !slices.Equal(c.Storage.PreviousMasterKeys, []string{a, b}) {
		t.Errorf("from the file: %v, %q", err, c.Storage.PreviousMasterKeys)
	}
	c, err = loadConfig("", environ("TROUPE_STORAGE_PREVIOUS_MASTER_KEYS= "+b+" ,"+a+",,"))
	if err != nil || !slices.Equal(c.Storage.PreviousMasterKeys, []string{b, a}) {
		t.Errorf("from the environment: %v, %q", err, c.Storage.PreviousMasterKeys)
	}
	c, err = loadConfig(writeFile(t, "t.yaml", "storage: {previous_master_keys: ["+a+"]}"), environ("TROUPE_STORAGE_PREVIOUS_MASTER_KEYS="))
	if err != nil || len(c.Storage.PreviousMasterKeys) != 0 {
		t.Errorf("an empty variable clears the file's list: %v, %q", err, c.Storage.PreviousMasterKeys)
	}
	if c, err := loadConfig("", environ()); err != nil || len(c.Storage.PreviousMasterKeys) != 0 {
		t.Errorf("default: %v, %q", err, c.Storage.PreviousMasterKeys)
	}

	// A malformed previous key is refused by name and index, without its value.
	cfg := testConfig(t)
	cfg.Storage.PreviousMasterKeys = []string{a, "not-a-key-but-a-secret"}
	_, err = openStore(t.Context(), cfg)
	if err == nil || !strings.Contains(err.Error(), "storage.previous_master_keys[1]") || strings.Contains(err.Error(), "not-a-key-but-a-secret") {
		t.Errorf("openStore with a bad previous key: %v", err)
	}
}

// TestKeyRotationReseal rotates the master key the way docs/storage.md
// tells operators to: accounts sealed with key A; the configuration becomes
// master B with A as previous; troupe accounts reseal (twice: the second
// run changes nothing); then Troupe starts with B alone and serves through
// those accounts, whose credentials the mock upstream checks.
func TestKeyRotationReseal(t *testing.T) {
	clearTroupeEnv(t)
	keyA, keyB := newMasterKey(t), newMasterKey(t)
	fleet := mock.New(mock.Config{})
	mockAddr, err := fleet.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	fa, pa := demoAccounts(4, mockAddr)
	for _, a := range fa {
		fleet.Add(a)
	}

	cfg := testConfig(t)
	cfg.Storage.MasterKey = keyA
	s, err := openStore(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range pa {
		if _, err := s.PutAccount(t.Context(), a); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	withKeys := func(master string, previous ...string) string {
		c := *cfg
		c.Storage.MasterKey, c.Storage.PreviousMasterKeys = master, previous
		return configFile(t, &c)
	}

	// B alone cannot open what A sealed, and says which key is missing.
	idA := storage.KeyID(mustParseKey(t, keyA))
	_, _, err = runCLI(t, "accounts", "list", "-c", withKeys(keyB))
	if err == nil || !strings.Contains(err.Error(), idA) {
		t.Fatalf("accounts list with B alone: err = %v, want one naming key %s", err, idA)
	}
	_, _, err = runCLI(t, "accounts", "reseal", "-c", withKeys(keyB))
	if err == nil || !strings.Contains(err.Error(), "previous_master_keys") {
		t.Errorf("reseal with B alone: err = %v, want a hint at storage.previous_master_keys", err)
	}

	// B with A as previous: everything opens; reseal moves every account to B.
	rotating := withKeys(keyB, keyA)
	if list := mustCLI(t, "accounts", "list", "-c", rotating); strings.Count(list, "demo-") != 4 {
		t.Fatalf("accounts list during rotation:\n%s", list)
	}
	idB := storage.KeyID(mustParseKey(t, keyB))
	out := mustCLI(t, "accounts", "reseal", "-c", rotating)
	if !strings.Contains(out, "4 accounts: 4 re-sealed with key "+idB+", 0 already sealed with it") || !strings.Contains(out, "can be removed") {
		t.Errorf("first reseal printed %q", out)
	}
	out = mustCLI(t, "accounts", "reseal", "-c", rotating)
	if !strings.Contains(out, "4 accounts: 0 re-sealed with key "+idB+", 4 already sealed with it") {
		t.Errorf("second reseal printed %q (want nothing left to do)", out)
	}
	// B alone: Troupe starts and serves through the re-sealed accounts.
	c := *cfg
	c.Storage.MasterKey, c.Storage.PreviousMasterKeys = keyB, nil
	a, err := startApp(t.Context(), &c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("start with B alone after reseal: %v", err)
	}
	a.serve()
	defer a.shutdown(10 * time.Second)
	accs, err := a.store.ListAccounts(t.Context())
	if err != nil || len(accs) != 4 {
		t.Fatalf("ListAccounts with B alone: %d, %v", len(accs), err)
	}
	for i, acc := range accs {
		if acc.Credentials != pa[i].Credentials {
			t.Errorf("%s: credentials changed across the rotation", acc.Name)
		}
	}
	secret, k, err := gateway.NewKey("rot")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.CreateAPIKey(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, a)
	eventually(t, 10*time.Second, "accounts in the pool", func() (bool, string) {
		return len(a.sys.Views()) == 4, fmt.Sprint(len(a.sys.Views()))
	})
	for _, model := range []string{demoOpenAIModel, demoCodexModel} {
		st, _, body, err := callGateway(a.baseURL(), secret, model)
		if err != nil || st != 200 || !strings.Contains(string(body), "Hello from demo-") {
			t.Errorf("%s through the re-sealed accounts: %d %v %.200s", model, st, err, body)
		}
	}
}

func mustParseKey(t *testing.T, s string) []byte {
	t.Helper()
	k, err := storage.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestCLIKeySecretNotice: each key create prints its secret on stdout and
// one notice on stderr naming the key, so that with the first secret
// captured (TROUPE_API_KEY=$(troupe keys create …)) the second command's
// notice is not read as a second notice for the one secret on screen.
func TestCLIKeySecretNotice(t *testing.T) {
	clearTroupeEnv(t)
	dir := filepath.Join(t.TempDir(), "data")
	for _, name := range []string{"my-app", "batch"} {
		out, errOut, err := runCLI(t, "keys", "create", "--name", name, "--data", dir)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out, "sk-troupe-") || strings.Count(out, "\n") != 1 {
			t.Errorf("%s: stdout %q, want the secret alone", name, out)
		}
		if strings.Count(errOut, "shown this once") != 1 || !strings.Contains(errOut, fmt.Sprintf("API key %q", name)) || strings.Contains(errOut, "sk-troupe-") {
			t.Errorf("%s: stderr %q, want one notice naming the key, without the secret", name, errOut)
		}
	}
}
