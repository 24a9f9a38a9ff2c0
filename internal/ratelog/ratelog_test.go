package ratelog

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	e := New(2, time.Second)
	var now int64 = 1e9
	e.now = func() int64 { return now }
	for i, want := range []bool{true, true, false, false} {
		if ok, held := e.Allow(); ok != want || held != 0 {
			t.Fatalf("line %d: %v held %d, want %v held 0", i, ok, held, want)
		}
	}
	now += int64(time.Second)
	if ok, held := e.Allow(); !ok || held != 2 {
		t.Fatalf("next window: %v held %d, want true held 2", ok, held)
	}
	if ok, held := e.Allow(); !ok || held != 0 {
		t.Fatalf("second line of the window: %v held %d, want true held 0", ok, held)
	}
}

// TestTakeDisabledLevel: a disabled level spends no budget and allocates
// nothing (the hot path guards its lines with Take).
func TestTakeDisabledLevel(t *testing.T) {
	l := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	e := New(1, time.Hour)
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		if ok, _ := e.Take(ctx, l, slog.LevelWarn); ok {
			t.Fatal("a disabled level passed")
		}
	}); n != 0 {
		t.Errorf("Take allocates %v times with the level off", n)
	}
	if ok, _ := e.Take(ctx, l, slog.LevelError); !ok {
		t.Fatal("the budget was spent by disabled lines")
	}
}
