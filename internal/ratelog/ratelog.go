// Package ratelog rate-limits log lines per event, so a failure that
// repeats thousands of times a second leaves a readable log: each Event
// lets at most Burst lines through per Interval and counts the lines it
// holds back, which the next line let through reports. It is lock-free and
// allocates nothing, so it may guard lines on the hot path:
//
//	if ok, held := failover.Take(ctx, log, slog.LevelWarn); ok {
//		log.LogAttrs(ctx, slog.LevelWarn, "failover", ..., slog.Int64("suppressed", held))
//	}
//
// With the level disabled Take returns false before touching the budget,
// and the attributes are never built.
package ratelog

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Event is the budget of one kind of log line. Build it with New; it is
// safe for concurrent use.
type Event struct {
	interval int64 // nanoseconds
	burst    int64
	start    atomic.Int64 // the current window's start, UnixNano
	used     atomic.Int64 // lines let through in the current window
	held     atomic.Int64 // lines held back since the last one let through
	now      func() int64
}

// New returns an Event that lets burst lines through per interval (burst
// at least 1; interval at least 1 ms).
func New(burst int, interval time.Duration) *Event {
	return &Event{interval: int64(max(interval, time.Millisecond)), burst: int64(max(burst, 1)),
		now: func() int64 { return time.Now().UnixNano() }}
}

// Allow spends one line of the budget. ok reports whether the line may be
// written; held is how many lines were held back since the last one let
// through (only when ok; the line should say so when it is not 0).
func (e *Event) Allow() (ok bool, held int64) {
	now := e.now()
	if s := e.start.Load(); now-s >= e.interval && e.start.CompareAndSwap(s, now) {
		e.used.Store(0)
	}
	if e.used.Add(1) > e.burst {
		e.held.Add(1)
		return false, 0
	}
	return true, e.held.Swap(0)
}

// Take is Allow for a line at level on l: false at once, spending nothing,
// when l does not log that level. A nil Event lets nothing through.
func (e *Event) Take(ctx context.Context, l *slog.Logger, level slog.Level) (ok bool, held int64) {
	if e == nil || !l.Enabled(ctx, level) {
		return false, 0
	}
	return e.Allow()
}
