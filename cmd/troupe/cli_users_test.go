package main

import (
	"strings"
	"testing"

	"github.com/troupe-gw/troupe/storage"
)

// TestCLIUsersAndPrices drives users add, list, topup and show, keys create
// --user and prices set and list on one data directory, as an operator's
// script would, with amounts as decimal strings read exactly.
func TestCLIUsersAndPrices(t *testing.T) {
	clearTroupeEnv(t)
	cfg := testConfig(t)
	dir := cfg.DataDir
	cli := func(args ...string) string { t.Helper(); return mustCLI(t, append(args, "--data", dir)...) }
	fails := func(want string, args ...string) {
		t.Helper()
		_, errOut, err := runCLI(t, append(args, "--data", dir)...)
		if err == nil || !strings.Contains(err.Error()+errOut, want) {
			t.Fatalf("troupe %s: err %v (stderr %q), want it to say %q", strings.Join(args, " "), err, errOut, want)
		}
	}

	if out := cli("users", "add", "alice", "--balance", "20.5", "--email", "alice@example.com", "--rpm", "60"); !strings.Contains(out, "20.500000") {
		t.Fatalf("users add: %q", out)
	}
	cli("users", "add", "bob", "--password", "correct horse battery staple 42", "--concurrency", "2", "--models", "gpt-5,claude-sonnet-4")
	fails("exists", "users", "add", "alice")
	fails("at most 6 digits", "users", "add", "carol", "--balance", "1.0000001")
	fails("negative", "users", "add", "carol", "--balance", "-1")
	fails("not micro-units, with at most 6 digits after the point: 12.50 is twelve and a half units", "users", "add", "carol", "--balance", "2e7")
	fails("password", "users", "add", "carol", "--password", "short")

	if out := cli("users", "topup", "alice", "0.000001", "--note", "rounding test"); !strings.Contains(out, "alice\t20.500001") {
		t.Fatalf("users topup: %q", out)
	}
	fails("--note is required", "users", "topup", "alice", "5")
	fails("must be positive", "users", "topup", "alice", "0", "--note", "x")
	fails("not an amount", "users", "topup", "alice", "5e3", "--note", "x")
	fails("not found", "users", "topup", "nobody", "5", "--note", "x")

	show := cli("users", "show", "alice")
	for _, want := range []string{"balance        20.500001 USD", "email          alice@example.com", "rpm            60", "console login  no", "rounding test", "starting balance", "topup"} {
		if !strings.Contains(show, want) {
			t.Errorf("users show lacks %q:\n%s", want, show)
		}
	}
	if show := cli("users", "show", "bob"); !strings.Contains(show, "console login  yes") || !strings.Contains(show, "gpt-5,claude-sonnet-4") || !strings.Contains(show, "0.000000 USD") {
		t.Errorf("users show bob:\n%s", show)
	}
	list := cli("users", "list")
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || strings.Fields(lines[1])[0] != "alice" || strings.Fields(lines[1])[3] != "20.500001" ||
		strings.Fields(lines[2])[0] != "bob" || strings.Fields(lines[2])[7] != "2" {
		t.Fatalf("users list:\n%s", list)
	}

	secret := strings.TrimSpace(cli("keys", "create", "--name", "alice-laptop", "--user", "alice"))
	fails("troupe users list", "keys", "create", "--name", "x", "--user", "nobody")
	fails("cannot be an admin key", "keys", "create", "--name", "y", "--user", "alice", "--admin")
	s, err := openStore(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	k, err := s.APIKeyByHash(t.Context(), storage.HashKey(secret))
	u, uerr := s.GetUser(t.Context(), "alice")
	s.Close()
	if err != nil || uerr != nil || k.UserID != u.ID || k.Name != "alice-laptop" {
		t.Fatalf("the key's user is %q (%v, %v), want alice's %q", k.UserID, err, uerr, u.ID)
	}

	out := cli("prices", "set", "gpt-5", "--input", "1.25", "--output", "10")
	if f := strings.Fields(strings.Split(strings.TrimSpace(out), "\n")[1]); len(f) != 7 || f[2] != "1.250000" || f[3] != "1.250000" || f[4] != "1.562500" || f[5] != "10.000000" || f[1] != "USD" {
		t.Fatalf("prices set with defaults: %q", out)
	}
	cli("prices", "set", "claude-sonnet-4", "--input", "3", "--output", "15", "--cached-input", "0.3", "--cache-write", "3.75")
	cli("prices", "set", "gpt-5", "--input", "1.25", "--output", "10", "--cached-input", "0.125")
	fails("--input and --output are required", "prices", "set", "m", "--input", "1")
	fails("not an amount", "prices", "set", "m", "--input", "0.1.2", "--output", "1")
	fails("cannot be negative", "prices", "set", "m", "--input=-1", "--output", "1")
	list = cli("prices", "list")
	lines = strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != 3 {
		t.Fatalf("prices list:\n%s", list)
	}
	if f := strings.Fields(lines[1]); f[0] != "claude-sonnet-4" || f[3] != "0.300000" || f[4] != "3.750000" || f[5] != "15.000000" {
		t.Errorf("claude-sonnet-4: %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[0] != "gpt-5" || f[3] != "0.125000" || f[4] != "1.562500" {
		t.Errorf("gpt-5 after the second set: %q", lines[2])
	}
}
