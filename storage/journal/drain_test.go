package journal

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// TestWaitDrainedEmpty: an empty journal is drained at once, even for a
// context that has already ended, before and after Close.
func TestWaitDrainedEmpty(t *testing.T) {
	h := open(t, filepath.Join(t.TempDir(), "usage.journal"), newStore(), Options{})
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := h.j.WaitDrained(done); err != nil {
		t.Fatalf("empty journal: %v, want nil", err)
	}
	if err := h.j.InsertUsage(t.Context(), batch(0, 3)); err != nil { // written directly: still empty
		t.Fatal(err)
	}
	if err := h.j.WaitDrained(done); err != nil {
		t.Fatalf("after a direct write: %v, want nil", err)
	}
	h.j.Close()
	if err := h.j.WaitDrained(done); err != nil {
		t.Fatalf("empty journal after Close: %v, want nil", err)
	}
}

// TestWaitDrainedDuringReplay, in a bubble so that "still waiting" is a
// fact, not a guess: a waiter called while storage is down blocks (a
// second one's ctx ends it with ctx's error) and returns nil on the replay
// round after storage comes back, with everything written; journalled
// again, the journal is waited for afresh.
func TestWaitDrainedDuringReplay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newStore()
		st.down.Store(true)
		j, err := Open(filepath.Join(t.TempDir(), "usage.journal"), st,
			Options{RetryInterval: time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		if err := j.InsertUsage(t.Context(), batch(0, 10)); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() { waited <- j.WaitDrained(t.Context()) }()
		short, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		if err := j.WaitDrained(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a waiter whose ctx ends while storage is down: %v, want DeadlineExceeded", err)
		}
		synctest.Wait()
		select {
		case err := <-waited:
			t.Fatalf("WaitDrained returned %v with %+v journalled", err, j.Stats())
		default:
		}
		st.down.Store(false)
		time.Sleep(time.Second) // the bubble's clock: the next replay round
		synctest.Wait()
		select {
		case err := <-waited:
			if err != nil {
				t.Fatalf("after the replay: %v", err)
			}
		default:
			t.Fatalf("WaitDrained still waiting after a replay round with storage up: %+v", j.Stats())
		}
		if n, _ := st.count(); n != 10 || j.Stats().Pending != 0 {
			t.Fatalf("drained with %d records stored, %+v", n, j.Stats())
		}

		st.down.Store(true)
		if err := j.InsertUsage(t.Context(), batch(10, 10)); err != nil {
			t.Fatal(err)
		}
		go func() { waited <- j.WaitDrained(t.Context()) }()
		synctest.Wait()
		select {
		case err := <-waited:
			t.Fatalf("journalled again: WaitDrained returned %v at once", err)
		default:
		}
		st.down.Store(false)
		if err := <-waited; err != nil { // the bubble's clock moves to the next round
			t.Fatal(err)
		}
		if n, _ := st.count(); n != 20 {
			t.Fatalf("%d records stored, want 20", n)
		}
	})
}

// TestWaitDrainedClose: Close ends a waiter with ErrClosed while records
// are journalled, and a call after Close returns ErrClosed at once, even
// for a context that has ended; the next Open drains them.
func TestWaitDrainedClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "usage.journal")
	st := newStore()
	st.down.Store(true)
	h := open(t, path, st, Options{RetryInterval: time.Hour})
	if err := h.j.InsertUsage(t.Context(), batch(0, 10)); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- h.j.WaitDrained(context.Background()) }()
	h.j.Close()
	select {
	case err := <-waited:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("waiter at Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end WaitDrained")
	}
	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := h.j.WaitDrained(done); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v, want ErrClosed", err)
	}
	if err := h.j.InsertUsage(t.Context(), batch(10, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("a batch for the closed journal: %v, want ErrClosed", err)
	}
	st.down.Store(false)
	open(t, path, st, Options{}).drained(t)
	if n, _ := st.count(); n != 10 {
		t.Fatalf("%d records after reopening, want 10", n)
	}
}
