package scripts

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWatcher(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mine.lua")
	write := func(src string) {
		t.Helper()
		// Write and rename, as editors do.
		tmp := filepath.Join(dir, ".mine.lua.tmp")
		if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("function score() return 1 end")

	var swapped []string // digests: a file is no stored version, every load of it is version 0
	h := NewHost(HostOptions{Options: testOptions, OnSwap: func(p *Policy) { swapped = append(swapped, p.Digest()) }})
	w := NewWatcher(h, dir, "mine", nil)
	w.debounce = 20 * time.Millisecond
	if _, err := w.Load(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(50 * time.Millisecond) // let Run start watching

	write("function score() return 2 end")
	d1 := h.Status().Digest
	waitFor(t, "the new version", func() bool { st := h.Status(); return st.OK && st.Digest != d1 })
	d2 := h.Active().Digest()

	write("function score() return 'broken' end")
	waitFor(t, "the failed reload", func() bool { return h.Status().Failures == 1 })
	if st := h.Status(); st.Version != 0 || h.Active().Digest() != d2 || st.Line != 1 {
		t.Fatalf("after a broken save: %+v", st)
	}

	// Another file in the directory is not the active policy.
	if err := os.WriteFile(filepath.Join(dir, "other.lua"), []byte("function score() return 3 end"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if st := h.Status(); st.Loads != 3 {
		t.Fatalf("a change to other.lua reloaded: %+v", st)
	}

	// Switching to a built-in name without a file loads the shipped policy.
	if p, err := w.SetActive("round_robin"); err != nil || p.Name() != "round_robin" || h.Status().Version != 0 || h.Status().Loads != 4 {
		t.Fatalf("SetActive(round_robin) = %v, %v", p, err)
	}
	if _, err := w.SetActive("nowhere"); err == nil || h.Active().Name() != "round_robin" {
		t.Fatalf("SetActive(nowhere) = %v, active %s", err, h.Active().Name())
	}
	if len(swapped) != 3 || swapped[2] != h.Active().Digest() {
		t.Fatalf("OnSwap saw %v", swapped)
	}
}

func TestWatcherMissingDir(t *testing.T) {
	w := NewWatcher(NewHost(HostOptions{}), filepath.Join(t.TempDir(), "absent"), "smart", nil)
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("Run on a missing directory succeeded")
	}
}

// A policy file over MaxSourceBytes is refused without being read whole:
// the last good policy serves on and the failure is in the status.
func TestWatcherRefusesOversizedFile(t *testing.T) {
	dir := t.TempDir()
	h := NewHost(HostOptions{})
	if _, err := h.LoadBuiltin("round_robin"); err != nil {
		t.Fatal(err)
	}
	big := "function score(a, now) return 1 end\n--" + strings.Repeat("x", MaxSourceBytes) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "big.lua"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(h, dir, "big", nil)
	_, err := w.Load()
	var pe *Error
	if !errors.As(err, &pe) || !strings.Contains(pe.Msg, "at most") {
		t.Fatalf("oversized file: %v", err)
	}
	if h.Active().Name() != "round_robin" {
		t.Errorf("active policy %s after a refused file", h.Active().Name())
	}
	if st := h.Status(); st.OK || !strings.Contains(st.Error, "at most") {
		t.Errorf("status after a refused file: %+v", st)
	}
}
