package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// adminLogin logs in to the admin API at base and returns the status.
func adminLogin(t *testing.T, base, password string) int {
	t.Helper()
	resp, err := http.Post(base+"/api/admin/login", "application/json",
		strings.NewReader(`{"username":"admin","password":"`+password+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestFirstStartCreatesAdmin(t *testing.T) {
	cfg := testConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logged bytes.Buffer
	a, err := startApp(ctx, cfg, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	a.serve()
	pw := a.admin.generated
	if !a.admin.created || len(pw) < 20 {
		t.Fatalf("first start: %+v", a.admin)
	}
	var out bytes.Buffer
	a.printAdminPassword(&out)
	a.printAdminPassword(&out) // printed once
	if strings.Count(out.String(), "TROUPE_ADMIN_PASSWORD="+pw+"\n") != 1 || !strings.Contains(out.String(), "/admin") {
		t.Fatalf("printed: %q", out.String())
	}
	// One notice for the one secret: stdout names the user beside its
	// password; the log says the user was made, not the notice again.
	if all := out.String() + logged.String(); strings.Count(all, "once") != 1 || !strings.Contains(out.String(), `user "admin"`) {
		t.Fatalf("notices of the admin password: stdout %q, log %q", out.String(), logged.String())
	}
	base := strings.TrimSuffix(a.baseURL(), "/v1")
	if st := adminLogin(t, base, pw); st != 200 {
		t.Fatalf("login with the printed password: %d", st)
	}
	if err := a.shutdown(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	// A second start keeps the user and prints nothing.
	cfg.Admin.Password = "ignored once a user exists"
	b, err := startApp(ctx, cfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer b.shutdown(5 * time.Second)
	if b.admin.created || b.admin.generated != "" {
		t.Fatalf("second start: %+v", b.admin)
	}
}

func TestAdminPasswordFromEnvironment(t *testing.T) {
	c, err := loadConfig("", environ("TROUPE_ADMIN_PASSWORD=from the environment"))
	if err != nil || c.Admin.Password != "from the environment" || c.Mode != modeDevelopment {
		t.Fatalf("config: %q %q %v", c.Admin.Password, c.Mode, err)
	}
	c.Listen, c.DataDir, c.Log.Level = "127.0.0.1:0", t.TempDir(), "warn"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := startApp(ctx, c, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer a.shutdown(5 * time.Second)
	a.serve()
	if !a.admin.created || a.admin.generated != "" {
		t.Fatalf("setup: %+v", a.admin)
	}
	if st := adminLogin(t, strings.TrimSuffix(a.baseURL(), "/v1"), "from the environment"); st != 200 {
		t.Fatalf("login: %d", st)
	}
}

// Production mode refuses empty, default and guessable secrets: a master
// key of 32 zero bytes, a repeated pattern or a counting sequence, and
// common admin passwords (before, it took all of these; issue 16, finding 6).
func TestProductionModeRefusesDefaultSecrets(t *testing.T) {
	const key = "TROUPE_STORAGE_MASTER_KEY=PaZNYcKnRMjVpGPb7GZYH8/eArA5TEcGOFWKTv0wK/I=" // 32 random bytes
	weak := func(k string) []string { return []string{"TROUPE_MODE=production", "TROUPE_STORAGE_MASTER_KEY=" + k} }
	for _, tc := range []struct {
		env  []string
		want string // in the error; "" means it loads
	}{
		{[]string{"TROUPE_MODE=staging"}, "want development or production"},
		{[]string{"TROUPE_MODE=production"}, "storage.master_key"},
		{weak("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="), "distinct byte values"}, // 32 zero bytes
		{weak(strings.Repeat("deadbeef", 8)), "4 distinct byte values"},
		{weak(strings.Repeat("3f9a1c77e0b24d58a6c31e9f05d2b84a", 2)), "repeats a 16-byte pattern"}, // hex
		{weak("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="), "counts in equal steps"},            // 00 01 … 1f
		{weak("Y29ycmVjdCBob3JzZSBiYXR0ZXJ5IHN0YXBsZSAxMjM="), "printable text"},                   // "correct horse battery staple 123"
		{[]string{"TROUPE_MODE=production", key, "TROUPE_ADMIN_PASSWORD=short"}, "at least 12"},
		{[]string{"TROUPE_MODE=production", key, "TROUPE_ADMIN_PASSWORD=changemechangeme"}, "too easy to guess"},
		{[]string{"TROUPE_MODE=production", key, "TROUPE_ADMIN_PASSWORD=password1234"}, "too easy to guess"},
		{[]string{"TROUPE_MODE=production", key, "TROUPE_ADMIN_PASSWORD=changeme1234"}, "too easy to guess"},
		{[]string{"TROUPE_MODE=production", key, "TROUPE_ADMIN_PASSWORD=aaaaaaaaaaaa"}, "too easy to guess"},
		{[]string{"TROUPE_MODE=development", "TROUPE_STORAGE_MASTER_KEY=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}, ""}, // development does not judge
		{[]string{"TROUPE_MODE=production", key}, ""},
		{[]string{"TROUPE_MODE=production", key, "TROUPE_ADMIN_PASSWORD=a long production password"}, ""},
	} {
		_, err := loadConfig("", environ(tc.env...))
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%v: err %v, want %q", tc.env, err, tc.want)
		}
	}
	// Production without admin.password cannot create the first admin user.
	c, err := loadConfig("", environ("TROUPE_MODE=production", key))
	if err != nil {
		t.Fatal(err)
	}
	c.Listen, c.DataDir, c.Log.Level = "127.0.0.1:0", t.TempDir(), "warn"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if a, err := startApp(ctx, c, quietLogger()); err == nil || !strings.Contains(err.Error(), "admin.password") {
		if a != nil {
			a.shutdown(5 * time.Second)
		}
		t.Fatalf("production start without an admin password: %v", err)
	}
	c.Admin.Password = "a long production password"
	a, err := startApp(ctx, c, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	a.shutdown(5 * time.Second)
}

func TestDemoResetsAdminPassword(t *testing.T) {
	cfg := testConfig(t)
	cfg.Admin.Password = "demo password 1"
	d := startTestDemo(t, cfg, tuned(span(1, 2, 1), nil))
	if d.adminPassword != "demo password 1" {
		t.Fatalf("demo admin password %q", d.adminPassword)
	}
	if st := adminLogin(t, strings.TrimSuffix(d.base, "/v1"), "demo password 1"); st != 200 {
		t.Fatalf("login: %d", st)
	}
	// The next demo start on the same data sets a fresh random password.
	pw, err := resetAdminPassword(context.Background(), d.app.store, "")
	if err != nil || len(pw) < 20 {
		t.Fatalf("reset: %q %v", pw, err)
	}
	if st := adminLogin(t, strings.TrimSuffix(d.base, "/v1"), "demo password 1"); st != 401 {
		t.Fatalf("old password after reset: %d", st)
	}
	if st := adminLogin(t, strings.TrimSuffix(d.base, "/v1"), pw); st != 200 {
		t.Fatalf("new password: %d", st)
	}
}

// A first start that cannot listen creates no admin user (its generated
// password would never be printed), and `troupe admin password` is the way
// back in when a password is lost: it prints a new one that logs in.
func TestAdminPasswordRecovery(t *testing.T) {
	cfg := testConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := cfg.Listen
	cfg.Listen = busy.Addr().String()
	if _, err := startApp(ctx, cfg, quietLogger()); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("start on a busy port: %v", err)
	}
	busy.Close()
	cfg.Listen = listen
	a, err := startApp(ctx, cfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if !a.admin.created || a.admin.generated == "" {
		t.Fatalf("the start after a failed one did not create the admin user: %+v", a.admin)
	}
	a.serve()
	defer a.shutdown(5 * time.Second)
	base := strings.TrimSuffix(a.baseURL(), "/v1")
	// The first password is lost: set a new one from the command line.
	clearTroupeEnv(t)
	out := mustCLI(t, "admin", "password", "--data", cfg.DataDir)
	pw, ok := strings.CutPrefix(strings.TrimSpace(out), "TROUPE_ADMIN_PASSWORD=")
	if !ok || len(pw) < 20 {
		t.Fatalf("admin password printed %q", out)
	}
	if st := adminLogin(t, base, pw); st != 200 {
		t.Fatalf("login with the new password: %d", st)
	}
	if st := adminLogin(t, base, a.admin.generated); st == 200 {
		t.Fatal("the old password still logs in")
	}
}
