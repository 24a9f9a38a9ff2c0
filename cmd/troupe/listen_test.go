package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBusyPortFailsFirst: a gateway or demo whose port is taken fails at
// once with what to do, before it opens storage (no troupe.db is made), so
// before the pool, the mock fleet and the demo's key are built.
func TestBusyPortFailsFirst(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(what string, err error, dir string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s started on a busy port", what)
		}
		if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), busy.Addr().String()) || !strings.Contains(err.Error(), "--listen ADDR") {
			t.Errorf("%s: %v, want EADDRINUSE naming the address and --listen", what, err)
		}
		if _, serr := os.Stat(filepath.Join(dir, "troupe.db")); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("%s: storage opened before the port was checked (%v)", what, serr)
		}
	}

	cfg := testConfig(t)
	cfg.Listen = busy.Addr().String()
	a, err := startApp(ctx, cfg, quietLogger())
	if err == nil {
		a.shutdown(5 * time.Second)
	}
	check("serve", err, cfg.DataDir)

	dcfg := testConfig(t)
	dcfg.Listen = busy.Addr().String()
	d, err := startDemo(ctx, dcfg, 4, 0, "127.0.0.1:0", io.Discard)
	if err == nil {
		d.close()
	}
	check("demo", err, dcfg.DataDir)
}

// mustFreeAddr returns a 127.0.0.1 address whose port is free now.
func mustFreeAddr(t *testing.T) string {
	t.Helper()
	a, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestDemoMockListen: troupe demo --mock-listen puts the mock fleet on the
// address given (the demo's accounts point at it), and a taken one fails
// naming the flag.
func TestDemoMockListen(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := mustFreeAddr(t)
	d, err := startDemo(ctx, testConfig(t), 4, 0, want, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := d.mockAddr
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("mock fleet on %s, want --mock-listen %s", got, want)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if d, err := startDemo(ctx, testConfig(t), 4, 0, busy.Addr().String(), io.Discard); err == nil {
		d.close()
		t.Fatal("the demo started its mock fleet on a taken port")
	} else if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "--mock-listen") {
		t.Fatalf("mock fleet on a taken port: %v, want EADDRINUSE naming --mock-listen", err)
	}
}

// TestBenchListenFlags: --mock-listen and --gateway-listen are refused
// where troupe bench starts no such process, and a taken address fails
// before anything starts.
func TestBenchListenFlags(t *testing.T) {
	clearTroupeEnv(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gateway-listen", busy.Addr().String()}, "--gateway-listen: listen on " + busy.Addr().String() + ": address already in use"},
		{[]string{"--mock-listen", busy.Addr().String()}, "--mock-listen: listen on " + busy.Addr().String() + ": address already in use"},
		{[]string{"--target", "http://127.0.0.1:1/v1", "--key", "k", "--gateway-listen", "127.0.0.1:0"}, "--gateway-listen: --target measures a running gateway"},
		{[]string{"--mock", "http://127.0.0.1:1/v1", "--mock-listen", "127.0.0.1:0"}, "--mock-listen: --mock uses a running mock fleet"},
		{[]string{"--scenario", "fleet", "--gateway-listen", "127.0.0.1:0"}, "--gateway-listen: scenario fleet starts"},
	} {
		_, _, err := runCLI(t, append([]string{"bench", "--out", t.TempDir()}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("troupe bench %s: %v, want %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}

// TestFailedStartRemovesItsDataDir: serve, demo and mock failing to start
// (here on a busy port) remove the data directory they made, its parents
// made with it included, and leave one that existed before, with what it
// holds.
func TestFailedStartRemovesItsDataDir(t *testing.T) {
	clearTroupeEnv(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range [][]string{
		{"serve", "--listen", busy.Addr().String()},
		{"demo", "--listen", busy.Addr().String(), "--accounts", "4"},
		{"mock", "--listen", busy.Addr().String(), "--accounts", "4"},
	} {
		root := filepath.Join(t.TempDir(), "new")
		dir := filepath.Join(root, "data")
		if _, _, err := runCLI(t, append(tc, "--data", dir)...); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("troupe %s on a busy port: %v, want EADDRINUSE", tc[0], err)
		}
		if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("troupe %s: the failed start left %s behind (%v)", tc[0], root, err)
		}
		// A directory that existed is left as it was.
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		keep := filepath.Join(dir, "keep")
		if err := os.WriteFile(keep, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := runCLI(t, append(tc, "--data", dir)...); err == nil {
			t.Fatalf("troupe %s on a busy port started", tc[0])
		}
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("troupe %s: a failed start on an existing directory removed what it held: %v", tc[0], err)
		}
	}
}

// TestListenBarePort: --listen 9000 is 127.0.0.1:9000 (serve, demo and
// mock: here on a busy port, whose error names the address it became), a
// --listen without a port asks for HOST:PORT, and --port, which Troupe
// does not have, points to --listen (bench's to --gateway-listen).
func TestListenBarePort(t *testing.T) {
	clearTroupeEnv(t)
	for in, want := range map[string]string{"19756": "127.0.0.1:19756", "0": "127.0.0.1:0", "127.0.0.1:9000": "127.0.0.1:9000", ":9000": ":9000", "[::1]:9000": "[::1]:9000"} {
		if got, err := hostPort("--listen", in); err != nil || got != want {
			t.Errorf("hostPort(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"localhost", "127.0.0.1", "70000", "-1", "+80", "http://127.0.0.1:9000"} {
		if got, err := hostPort("--listen", in); err == nil || !strings.Contains(err.Error(), "want HOST:PORT") {
			t.Errorf("hostPort(%q) = %q, %v; want an error asking for HOST:PORT", in, got, err)
		}
	}

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, port, _ := net.SplitHostPort(busy.Addr().String())
	for _, cmd := range []string{"serve", "demo", "mock"} {
		_, _, err := runCLI(t, cmd, "--listen", port, "--data", filepath.Join(t.TempDir(), "d"))
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "listen on "+busy.Addr().String()) {
			t.Errorf("troupe %s --listen %s: %v, want it taken as %s (busy)", cmd, port, err, busy.Addr())
		}
		if _, _, err := runCLI(t, cmd, "--listen", "localhost", "--data", filepath.Join(t.TempDir(), "d")); err == nil || !strings.Contains(err.Error(), `"localhost": want HOST:PORT`) {
			t.Errorf("troupe %s --listen localhost: %v, want a request for HOST:PORT", cmd, err)
		}
		if _, _, err := runCLI(t, cmd, "--port", "9000"); err == nil || !strings.Contains(err.Error(), "unknown flag: --port") ||
			!strings.Contains(err.Error(), "--listen HOST:PORT") {
			t.Errorf("troupe %s --port: %v, want it to point to --listen", cmd, err)
		}
	}
	if _, _, err := runCLI(t, "demo", "--mock-listen", "localhost"); err == nil || !strings.Contains(err.Error(), "--mock-listen \"localhost\": want HOST:PORT") {
		t.Errorf("troupe demo --mock-listen localhost: %v", err)
	}
	if _, _, err := runCLI(t, "bench", "--port", "9000"); err == nil || !strings.Contains(err.Error(), "--gateway-listen HOST:PORT") {
		t.Errorf("troupe bench --port: %v, want it to point to --gateway-listen", err)
	}
	if _, _, err := runCLI(t, "keys", "list", "--port", "9000"); err == nil || err.Error() != "unknown flag: --port" {
		t.Errorf("troupe keys list --port: %v, want cobra's error alone (no address there)", err)
	}
}
