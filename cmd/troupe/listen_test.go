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
	d, err := startDemo(ctx, dcfg, 4, 0, io.Discard)
	if err == nil {
		d.close()
	}
	check("demo", err, dcfg.DataDir)
}
