package main

import (
	"bufio"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStop starts troupe serve as a process of its own (this test binary as
// troupe), waits for its first-start password on stdout (printed after the
// pid file is written), and stops it with troupe stop: the process exits
// cleanly and the pid file is gone. A second stop, and a stop of a pid file
// nobody holds (a process killed with -9), say no troupe runs and signal
// nothing.
func TestStop(t *testing.T) {
	clearTroupeEnv(t)
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	child := exec.CommandContext(ctx, os.Args[0], "serve", "--listen", "127.0.0.1:0", "--data", dir)
	child.Env = append(os.Environ(), benchChildVar+"=1", "TROUPE_LOG_LEVEL=warn")
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "TROUPE_ADMIN_PASSWORD=") {
	}
	go func() {
		for sc.Scan() {
		}
		exited <- child.Wait()
	}()
	pid, addr, running, err := readPidFile(dir)
	if err != nil || pid != child.Process.Pid || !running || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("pid file: pid %d addr %q running %v err %v; want pid %d, running", pid, addr, running, err, child.Process.Pid)
	}

	// A second serve on the directory says which troupe runs there and how
	// to stop it, not the journal lock's internals.
	_, _, err = runCLI(t, "serve", "--listen", "127.0.0.1:0", "--data", dir)
	want := "another troupe is already running on the data directory " + dir + " (pid " + strconv.Itoa(pid) + ", listening on " + addr + "): stop it with `troupe stop --data " + dir + "`"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "usage.journal") {
		t.Fatalf("a second serve: %v, want %q", err, want)
	}

	out, errOut, err := runCLI(t, "stop", "--data", dir)
	if err != nil || !strings.Contains(out, "stopped troupe (pid "+strconv.Itoa(pid)+")") {
		t.Fatalf("troupe stop: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("serve exited with %v, want a clean exit", err)
		}
	case <-ctx.Done():
		t.Fatal("serve did not exit")
	}
	if _, err := os.Stat(filepath.Join(dir, pidFileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("pid file left behind: %v", err)
	}
	if _, _, err := runCLI(t, "stop", "--data", dir); err == nil || !strings.Contains(err.Error(), "no troupe runs on") {
		t.Fatalf("a second stop: %v, want no troupe runs", err)
	}
	// A stale file (its process was killed -9) names a pid nobody holds the
	// file for: it is removed, and the pid, here this test's own, is not
	// signalled.
	if err := os.WriteFile(filepath.Join(dir, pidFileName), []byte(strconv.Itoa(os.Getpid())+"\n127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "stop", "--data", dir); err == nil || !strings.Contains(err.Error(), "exited without removing it") {
		t.Fatalf("stop on a stale pid file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, pidFileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stale pid file not removed: %v", err)
	}
}

// startMockChild starts troupe mock as a process of its own (this test
// binary as troupe) in the working directory wd with args, waits for its
// MOCK_ADDR line (printed after its pid file is written) and returns the
// process, its address and a channel that receives its exit.
func startMockChild(t *testing.T, ctx context.Context, wd string, args ...string) (*exec.Cmd, string, <-chan error) {
	t.Helper()
	child := exec.CommandContext(ctx, os.Args[0], append([]string{"mock", "--listen", "127.0.0.1:0", "--accounts", "4"}, args...)...)
	child.Env = append(os.Environ(), benchChildVar+"=1")
	child.Dir = wd
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { child.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	addr := ""
	for addr == "" && sc.Scan() {
		addr, _ = strings.CutPrefix(sc.Text(), "MOCK_ADDR=")
	}
	if addr == "" {
		t.Fatalf("troupe mock %s printed no MOCK_ADDR", strings.Join(args, " "))
	}
	exited := make(chan error, 1)
	go func() {
		for sc.Scan() {
		}
		exited <- child.Wait()
	}()
	return child, addr, exited
}

// TestStopMock: troupe mock writes ./data/mock/troupe.pid of its working
// directory (or of --data DIR) once listening, a second mock on the same
// directory is refused naming the first's pid and troupe stop --mock, and
// troupe stop --mock (--mock --data DIR) stops it, leaving no pid file and
// no directory the mock made (./data/mock, ./data), while one that existed
// before it stays.
func TestStopMock(t *testing.T) {
	clearTroupeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wd := t.TempDir()
	child, addr, exited := startMockChild(t, ctx, wd)
	dir := filepath.Join(wd, "data", "mock")
	if pid, paddr, running, err := readPidFile(dir); err != nil || pid != child.Process.Pid || !running || paddr != addr {
		t.Fatalf("pid file: pid %d addr %q running %v err %v; want pid %d, %s, running", pid, paddr, running, err, child.Process.Pid, addr)
	}

	// A second mock on the directory (here in-process, with --data) is
	// refused, and its port is not kept.
	_, _, err := runCLI(t, "mock", "--listen", "127.0.0.1:0", "--accounts", "1", "--data", dir)
	want := "another troupe is already running on the data directory " + dir + " (pid " + strconv.Itoa(child.Process.Pid) + ", listening on " + addr + ")"
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--data DIR") {
		t.Fatalf("a second mock on %s: %v, want %q", dir, err, want)
	}

	// troupe stop --mock, from the mock's working directory.
	t.Chdir(wd)
	out, errOut, err := runCLI(t, "stop", "--mock")
	if err != nil || !strings.Contains(out, "stopped troupe (pid "+strconv.Itoa(child.Process.Pid)+")") {
		t.Fatalf("troupe stop --mock: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("mock exited with %v, want a clean exit", err)
		}
	case <-ctx.Done():
		t.Fatal("mock did not exit")
	}
	if _, err := os.Stat(filepath.Join(dir, pidFileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("pid file left behind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(wd, "data")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the mock's empty ./data/mock (and ./data) left behind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(wd, "data")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the mock's empty ./data/mock (and ./data) left behind: %v", err)
	}

	// --mock --data DIR: a mock started with --data.
	other := filepath.Join(t.TempDir(), "m")
	child, _, exited = startMockChild(t, ctx, wd, "--data", other)
	if out, errOut, err := runCLI(t, "stop", "--mock", "--data", other); err != nil || !strings.Contains(out, "stopped troupe (pid "+strconv.Itoa(child.Process.Pid)+")") {
		t.Fatalf("troupe stop --mock --data: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	<-exited
	if _, err := os.Stat(other); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the mock's empty --data %s left behind: %v", other, err)
	}

	// A directory that existed before the mock stays.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	child, _, exited = startMockChild(t, ctx, wd)
	if out, errOut, err := runCLI(t, "stop", "--mock"); err != nil || !strings.Contains(out, "stopped troupe (pid "+strconv.Itoa(child.Process.Pid)+")") {
		t.Fatalf("troupe stop --mock: %v\nstdout %s\nstderr %s", err, out, errOut)
	}
	<-exited
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("./data/mock, made before the mock, removed: %v", err)
	}
	if err := os.RemoveAll(filepath.Join(wd, "data")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "stop", "--mock"); err == nil || !strings.Contains(err.Error(), "no troupe runs on") {
		t.Fatalf("stop --mock with none running: %v", err)
	}
}
