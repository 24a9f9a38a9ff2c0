package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runCLI runs the troupe command line in-process and returns its stdout and
// stderr. TROUPE_* variables are cleared so only the flags choose the data dir.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	root := rootCmd()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetIn(strings.NewReader(""))
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return stdout.String(), stderr.String(), err
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := runCLI(t, args...)
	if err != nil {
		t.Fatalf("troupe %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// clearTroupeEnv unsets TROUPE_* for the test (make test sets some).
func clearTroupeEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "TROUPE_") {
			t.Setenv(name, "") // restored after the test
			os.Unsetenv(name)
		}
	}
}

// TestCLIKeysAndAccounts drives keys create/list/revoke and accounts
// add/list/remove against one data dir, then checks that the raw database
// files hold neither the key's secret nor the account's API key.
func TestCLIKeysAndAccounts(t *testing.T) {
	clearTroupeEnv(t)
	dir := filepath.Join(t.TempDir(), "data")

	// keys create prints the secret once, on stdout, and nothing else there.
	out, errOut, err := runCLI(t, "keys", "create", "--name", "x", "--data", dir)
	if err != nil {
		t.Fatalf("keys create: %v (%s)", err, errOut)
	}
	secret := strings.TrimSpace(out)
	if !strings.HasPrefix(secret, "sk-troupe-") || strings.ContainsAny(secret, " \t\n") || len(secret) < len("sk-troupe-")+20 {
		t.Fatalf("keys create printed %q, want one sk-troupe-… secret", out)
	}
	if strings.Contains(errOut, secret) {
		t.Errorf("the secret also went to stderr: %q", errOut)
	}
	if _, _, err := runCLI(t, "keys", "create", "--name", "x", "--data", dir); err == nil {
		t.Errorf("a second key named x was accepted")
	}
	if _, _, err := runCLI(t, "keys", "create", "--data", dir); err == nil {
		t.Errorf("keys create without --name succeeded")
	}
	mustCLI(t, "keys", "create", "--name", "y", "--models", "gpt-4.1-mini", "--data", dir)

	list := mustCLI(t, "keys", "list", "--data", dir)
	if strings.Contains(list, secret) {
		t.Fatalf("keys list prints the secret:\n%s", list)
	}
	if !strings.Contains(list, "x") || !strings.Contains(list, "gpt-4.1-mini") || !strings.Contains(list, "sk-troupe-") {
		t.Errorf("keys list lacks the keys or their prefixes:\n%s", list)
	}
	mustCLI(t, "keys", "revoke", "y", "--data", dir)
	if list := mustCLI(t, "keys", "list", "--data", dir); strings.Contains(list, "gpt-4.1-mini") {
		t.Errorf("revoked key y still listed:\n%s", list)
	}

	// accounts add / list / remove.
	const apiKey = "sk-upstream-DO-NOT-LEAK-0123456789"
	const accessToken = "eyJhbGciOi.DO-NOT-LEAK.sig"
	out = mustCLI(t, "accounts", "add", "--data", dir, "--name", "oai-1", "--provider", "openai", "--api-key", apiKey,
		"--models", "gpt-4.1-mini,gpt-4.1", "--max-concurrency", "8", "--group", "team-a")
	fields := strings.Split(strings.TrimSpace(out), "\t")
	if len(fields) != 2 || fields[0] == "" || fields[1] != "oai-1" {
		t.Fatalf("accounts add printed %q, want ID<TAB>NAME", out)
	}
	oaiID := fields[0]
	mustCLI(t, "accounts", "add", "--data", dir, "--name", "cx-1", "--provider", "codex", "--access-token", accessToken,
		"--account-id", "0000-1111", "--models", "gpt-5.5")
	// add again by name: refused, as keys create refuses a name in use,
	// and nothing changes; with --replace, a replacement keeping its ID.
	if _, _, err := runCLI(t, "accounts", "add", "--data", dir, "--name", "oai-1", "--provider", "openai", "--api-key", apiKey,
		"--models", "gpt-4.1-mini", "--max-concurrency", "3"); err == nil ||
		!strings.Contains(err.Error(), `an account named "oai-1" already exists`) || !strings.Contains(err.Error(), "--replace") {
		t.Errorf("re-adding oai-1 without --replace: %v, want a refusal naming --replace", err)
	}
	if list := mustCLI(t, "accounts", "list", "--data", dir); !strings.Contains(list, "gpt-4.1-mini,gpt-4.1") {
		t.Errorf("a refused add changed oai-1:\n%s", list)
	}
	out, errOut, err = runCLI(t, "accounts", "add", "--data", dir, "--replace", "--name", "oai-1", "--provider", "openai", "--api-key", apiKey,
		"--models", "gpt-4.1-mini", "--max-concurrency", "2")
	if err != nil || !strings.HasPrefix(out, oaiID+"\t") || !strings.Contains(errOut, `replaced account "oai-1"`) {
		t.Errorf("re-adding oai-1 with --replace: %v, printed %q %q, want its ID %s and a line saying it was replaced", err, out, errOut, oaiID)
	}
	// --replace with no such account adds it.
	mustCLI(t, "accounts", "add", "--data", dir, "--replace", "--name", "oai-9", "--provider", "openai", "--api-key", apiKey)
	mustCLI(t, "accounts", "remove", "--data", dir, "oai-9")
	if _, _, err := runCLI(t, "accounts", "add", "--data", dir, "--name", "bad", "--provider", "azure"); err == nil {
		t.Errorf("accounts add with provider azure succeeded")
	}

	list = mustCLI(t, "accounts", "list", "--data", dir)
	for _, leak := range []string{apiKey, accessToken} {
		if strings.Contains(list, leak) {
			t.Fatalf("accounts list prints a credential:\n%s", list)
		}
	}
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != 3 {
		t.Fatalf("accounts list: %d lines, want header + 2:\n%s", len(lines), list)
	}
	var oaiLine string
	for _, l := range lines {
		if strings.HasPrefix(l, "oai-1 ") {
			oaiLine = l
		}
	}
	if f := strings.Fields(oaiLine); len(f) < 6 || f[1] != "openai" || f[2] != "gpt-4.1-mini" || f[3] != "2" || f[len(f)-1] != oaiID {
		t.Errorf("oai-1 listed as %q (want the update: models gpt-4.1-mini, concurrency 2)", oaiLine)
	}
	if !strings.Contains(list, "cx-1") || !strings.Contains(list, "codex") {
		t.Errorf("cx-1 missing:\n%s", list)
	}

	mustCLI(t, "accounts", "remove", "--data", dir, "cx-1")
	mustCLI(t, "accounts", "remove", "--data", dir, oaiID) // by ID
	if list := mustCLI(t, "accounts", "list", "--data", dir); strings.Contains(list, "oai-1") || strings.Contains(list, "cx-1") {
		t.Errorf("removed accounts still listed:\n%s", list)
	}
	if _, _, err := runCLI(t, "accounts", "remove", "--data", dir, "cx-1"); err == nil {
		t.Errorf("removing a missing account succeeded")
	}

	// Keep one account with credentials, then look at the raw files: SQLite
	// with WAL keeps recent pages in troupe.db-wal, so every troupe.db* file
	// is read.
	mustCLI(t, "accounts", "add", "--data", dir, "--name", "oai-2", "--provider", "openai", "--api-key", apiKey)
	mustCLI(t, "accounts", "add", "--data", dir, "--name", "cx-2", "--provider", "codex", "--access-token", accessToken)
	files, _ := filepath.Glob(filepath.Join(dir, "troupe.db*"))
	if len(files) == 0 {
		t.Fatalf("no troupe.db* in %s", dir)
	}
	sawName := false
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for what, s := range map[string]string{"the API key secret": secret, "the account API key": apiKey, "the codex access token": accessToken, "the name oai-2": "oai-2"} {
			found := bytes.Contains(b, []byte(s))
			if what == "the name oai-2" {
				if found {
					sawName = true // names are stored in clear: proves the bytes read are the data
				}
				continue
			}
			if found {
				t.Errorf("%s holds %s in clear", filepath.Base(f), what)
			}
		}
	}
	if !sawName {
		t.Errorf("no troupe.db* file contains the account name oai-2: the raw-file check read nothing useful")
	}
}

func TestCLIVersionAndMigrate(t *testing.T) {
	clearTroupeEnv(t)
	if out := mustCLI(t, "version"); !strings.HasPrefix(out, "troupe ") {
		t.Errorf("version printed %q", out)
	}
	dir := filepath.Join(t.TempDir(), "data")
	if out := mustCLI(t, "migrate", "--data", dir); !strings.Contains(out, "migrations applied") {
		t.Errorf("migrate printed %q", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "master.key")); err != nil {
		t.Errorf("master.key not created: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "master.key")); err == nil && fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("master.key mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestAccountsAddRefusesWhatTheAdminAPIRefuses: a base_url that is not an
// absolute http(s) URL and a max_concurrency outside 0 to 10000 are refused
// by troupe accounts add and in the config file's accounts, as the admin API
// refuses them (400), and nothing is stored. Before, the CLI stored
// --max-concurrency -5 and --base-url ftp://x (found running the README's
// commands by hand; the admin API showed the account with max_concurrency -5).
func TestAccountsAddRefusesWhatTheAdminAPIRefuses(t *testing.T) {
	clearTroupeEnv(t)
	dir := filepath.Join(t.TempDir(), "data")
	mustCLI(t, "migrate", "--data", dir) // accounts list below reads storage that exists
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"ftp", []string{"--base-url", "ftp://x"}, "base_url"},
		{"relative", []string{"--base-url", "api.example.com/v1"}, "base_url"},
		{"negative", []string{"--max-concurrency", "-5"}, "max_concurrency -5"},
		{"huge", []string{"--max-concurrency", "10001"}, "max_concurrency 10001"},
	} {
		args := append([]string{"accounts", "add", "--data", dir, "--name", tc.name, "--provider", "openai", "--api-key", "k"}, tc.args...)
		_, _, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: accounts add %v: err %v, want one saying %q", tc.name, tc.args, err, tc.want)
		}
	}
	// An unknown provider is named as such, not as a missing flag.
	if _, _, err := runCLI(t, "accounts", "add", "--data", dir, "--name", "p", "--provider", "nope", "--api-key", "k"); err == nil ||
		!strings.Contains(err.Error(), `--provider "nope": want codex, openai, openai_compat or anthropic`) {
		t.Errorf("unknown provider: %v", err)
	}
	if _, _, err := runCLI(t, "accounts", "add", "--data", dir, "--provider", "openai", "--api-key", "k"); err == nil || err.Error() != "--name is required" {
		t.Errorf("no name: %v", err)
	}
	if list := mustCLI(t, "accounts", "list", "--data", dir); strings.Count(strings.TrimSpace(list), "\n") != 0 {
		t.Errorf("refused accounts were stored:\n%s", list)
	}
	mustCLI(t, "accounts", "add", "--data", dir, "--name", "ok", "--provider", "openai", "--api-key", "k",
		"--base-url", "http://127.0.0.1:1/v1", "--max-concurrency", "0")
	c := Config{Accounts: []AccountConfig{{Name: "a", Provider: "openai", BaseURL: "ftp://x"}, {Name: "b", Provider: "openai", MaxConcurrency: -1}}}
	err := c.validate()
	if err == nil || !strings.Contains(err.Error(), "accounts[0] (a): base_url") || !strings.Contains(err.Error(), "accounts[1] (b): max_concurrency -1") {
		t.Errorf("config with a bad base_url and max_concurrency: %v", err)
	}
}

// TestAccountsAddRefusesEmptyCredential: an account whose provider's
// credential is empty (as --api-key "$UNSET_VARIABLE" gives) is refused with
// an error naming the flag, and nothing is stored; a codex account may come
// with a refresh token alone.
func TestAccountsAddRefusesEmptyCredential(t *testing.T) {
	clearTroupeEnv(t)
	dir := filepath.Join(t.TempDir(), "data")
	mustCLI(t, "migrate", "--data", dir) // accounts list below reads storage that exists
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"openai", []string{"--provider", "openai", "--api-key", ""}, "--api-key is empty: an openai account"},
		{"compat", []string{"--provider", "openai_compat", "--base-url", "http://127.0.0.1:1/v1", "--api-key", "  "}, "--api-key is empty"},
		{"anthropic", []string{"--provider", "anthropic"}, "--api-key is empty: an anthropic account"},
		{"codex", []string{"--provider", "codex", "--account-id", "0000-1111"}, "--access-token or --refresh-token"},
	} {
		args := append([]string{"accounts", "add", "--data", dir, "--name", tc.name}, tc.args...)
		_, _, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: accounts add %v: err %v, want one saying %q", tc.name, tc.args, err, tc.want)
		}
	}
	// An unknown provider is named as such, not as a missing flag.
	if _, _, err := runCLI(t, "accounts", "add", "--data", dir, "--name", "p", "--provider", "nope", "--api-key", "k"); err == nil ||
		!strings.Contains(err.Error(), `--provider "nope": want codex, openai, openai_compat or anthropic`) {
		t.Errorf("unknown provider: %v", err)
	}
	if _, _, err := runCLI(t, "accounts", "add", "--data", dir, "--provider", "openai", "--api-key", "k"); err == nil || err.Error() != "--name is required" {
		t.Errorf("no name: %v", err)
	}
	if list := mustCLI(t, "accounts", "list", "--data", dir); strings.Count(strings.TrimSpace(list), "\n") != 0 {
		t.Errorf("refused accounts were stored:\n%s", list)
	}
	mustCLI(t, "accounts", "add", "--data", dir, "--name", "cx", "--provider", "codex", "--refresh-token", "rt-1")
	if list := mustCLI(t, "accounts", "list", "--data", dir); !strings.Contains(list, "cx") {
		t.Errorf("a codex account with a refresh token alone was not stored:\n%s", list)
	}
}

// TestReadCommandsCreateNothing: with no data directory (TROUPE_DATA_DIR
// unset, no --data, nothing in ./data), a command that reads storage, or
// changes what must be stored already, says there is no data directory
// here and how to point at one, and creates nothing; the same in a data
// directory without a troupe.db. A command that adds (keys create) makes
// the directory as before, and the reads work on it.
func TestReadCommandsCreateNothing(t *testing.T) {
	clearTroupeEnv(t)
	wd := t.TempDir()
	t.Chdir(wd)
	reads := [][]string{
		{"keys", "list"}, {"accounts", "list"}, {"users", "list"}, {"prices", "list"}, {"accounts", "export"},
		{"users", "show", "alice"}, {"keys", "revoke", "x"}, {"keys", "update", "x", "--rpm", "1"},
		{"accounts", "remove", "x"}, {"users", "topup", "alice", "1", "--note", "n"}, {"accounts", "reseal"},
	}
	for _, args := range reads {
		_, _, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), "no data directory here: ./data does not exist") ||
			!strings.Contains(err.Error(), "--data DIR, TROUPE_DATA_DIR=DIR or -c FILE") {
			t.Errorf("troupe %s without a data directory: %v, want it to say there is none and how to point at one", strings.Join(args, " "), err)
		}
	}
	if ents, err := os.ReadDir(wd); err != nil || len(ents) != 0 {
		t.Fatalf("read commands created %v (%v), want nothing", ents, err)
	}
	if err := os.Mkdir(filepath.Join(wd, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "keys", "list"); err == nil || !strings.Contains(err.Error(), "no Troupe storage in ./data (no troupe.db there") {
		t.Errorf("keys list in an empty data directory: %v", err)
	}
	if ents, err := os.ReadDir(filepath.Join(wd, "data")); err != nil || len(ents) != 0 {
		t.Fatalf("keys list created %v (%v) in an empty data directory", ents, err)
	}
	mustCLI(t, "keys", "create", "--name", "first")
	if list := mustCLI(t, "keys", "list"); !strings.Contains(list, "first") {
		t.Errorf("keys list after keys create:\n%s", list)
	}
}
