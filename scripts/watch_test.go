package scripts

import (
	"context"
	"errors"
	"github.com/troupe-gw/troupe/internal/poll"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 30*time.Second, what, cond)
}

// waitUntil polls cond until it holds (true) or d passes (false).
func waitUntil(d time.Duration, cond func() bool) bool {
	return poll.Within(d, cond)
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
	h := NewHost(HostOptions{Options: testOptions, Install: func(p *Policy) (func(), error) { return func() { swapped = append(swapped, p.Digest()) }, nil }})
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
	// Run starts watching on its own goroutine, at a moment the test cannot
	// see: the new version is written again until the watcher reloads it
	// (reloading the same source swaps nothing).
	d1 := h.Status().Digest
	for try := 0; ; try++ {
		write("function score() return 2 end")
		if waitUntil(200*time.Millisecond, func() bool { st := h.Status(); return st.OK && st.Digest != d1 }) {
			break
		}
		if try == 25 {
			t.Fatal("the watcher never reloaded the changed file")
		}
	}
	d2 := h.Active().Digest()

	write("function score() return 'broken' end")
	waitFor(t, "the failed reload", func() bool { return h.Status().Failures == 1 })
	if st := h.Status(); st.Version != 0 || h.Active().Digest() != d2 || st.Line != 1 {
		t.Fatalf("after a broken save: %+v", st)
	}
	loads := h.Status().Loads

	// Another file in the directory is not the active policy (the filter
	// itself is TestWatcherRelevant's): events are handled in order, so once
	// the next save of mine.lua is loaded, the write of other.lua before it
	// has been seen, and no load came of it beyond mine.lua's.
	if err := os.WriteFile(filepath.Join(dir, "other.lua"), []byte("function score() return 3 end"), 0o644); err != nil {
		t.Fatal(err)
	}
	write("function score() return 4 end")
	waitFor(t, "the fourth version", func() bool { st := h.Status(); return st.OK && st.Digest != d2 })
	if st := h.Status(); st.Loads != loads+1 {
		t.Fatalf("%d loads after saving other.lua and mine.lua, want %d: a change to other.lua reloaded", st.Loads, loads+1)
	}

	// Switching to a built-in name without a file loads the shipped policy.
	if p, err := w.SetActive("round_robin"); err != nil || p.Name() != "round_robin" || h.Status().Version != 0 || h.Status().Loads != loads+2 {
		t.Fatalf("SetActive(round_robin) = %v, %v", p, err)
	}
	if _, err := w.SetActive("nowhere"); err == nil || h.Active().Name() != "round_robin" {
		t.Fatalf("SetActive(nowhere) = %v, active %s", err, h.Active().Name())
	}
	if len(swapped) != 4 || swapped[3] != h.Active().Digest() {
		t.Fatalf("Install saw %v", swapped)
	}
}

// TestWatcherRelevant: only changes to the active policy's own file reload.
func TestWatcherRelevant(t *testing.T) {
	dir := t.TempDir()
	w := NewWatcher(NewHost(HostOptions{}), dir, "mine", nil)
	for _, c := range []struct {
		ev   fsnotify.Event
		want bool
	}{
		{fsnotify.Event{Name: filepath.Join(dir, "mine.lua"), Op: fsnotify.Write}, true},
		{fsnotify.Event{Name: filepath.Join(dir, "mine.lua"), Op: fsnotify.Create}, true},
		{fsnotify.Event{Name: filepath.Join(dir, "mine.lua"), Op: fsnotify.Rename}, true},
		{fsnotify.Event{Name: filepath.Join(dir, "mine.lua"), Op: fsnotify.Remove}, true},
		{fsnotify.Event{Name: filepath.Join(dir, "mine.lua"), Op: fsnotify.Chmod}, false},
		{fsnotify.Event{Name: filepath.Join(dir, "other.lua"), Op: fsnotify.Write}, false},
		{fsnotify.Event{Name: filepath.Join(dir, ".mine.lua.tmp"), Op: fsnotify.Create}, false},
	} {
		if got := w.relevant(c.ev); got != c.want {
			t.Errorf("relevant(%v) = %v, want %v", c.ev, got, c.want)
		}
	}
	if _, err := w.SetActive("round_robin"); err != nil {
		t.Fatal(err)
	}
	if !w.relevant(fsnotify.Event{Name: filepath.Join(dir, "round_robin.lua"), Op: fsnotify.Write}) {
		t.Error("after SetActive, the new active policy's file is not followed")
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
