package mock

import "sync/atomic"

// AccountStats is a snapshot of the request counters of one account (or of
// the whole fleet, see Fleet.TotalStats). Only answer requests (chat
// completions, responses, codex responses) are counted; model listings and
// requests that fail authentication are not.
//
// Between resets, Requests == Rejected + Completed + Cancelled + InFlight.
type AccountStats struct {
	// InFlight is the number of answers being produced right now: incremented
	// when a request is accepted (authenticated and valid), decremented once
	// when its answer ends for any reason.
	InFlight int64
	// MaxInFlight is the high-water mark of InFlight since the account was
	// added or since the last ResetStats.
	MaxInFlight int64
	// Requests is the number of requests authenticated as this account.
	Requests int64
	// Completed is the number of answers fully delivered (for a stream: the
	// last event was flushed; for JSON: the body was handed to the server).
	Completed int64
	// Cancelled is the number of accepted answers that ended early: the client
	// went away mid-stream, or the fleet was closed.
	Cancelled int64
	// Rejected is the number of authenticated requests answered with an error
	// status before any answer started (malformed JSON, unknown model, codex
	// stream/store violations, and later injected faults).
	Rejected int64
}

// counters are the live, lock-free counterpart of AccountStats.
type counters struct {
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	requests    atomic.Int64
	completed   atomic.Int64
	cancelled   atomic.Int64
	rejected    atomic.Int64
}

func (c *counters) request() { c.requests.Add(1) }
func (c *counters) reject()  { c.rejected.Add(1) }

// begin marks one answer as started.
func (c *counters) begin() {
	n := c.inFlight.Add(1)
	for {
		m := c.maxInFlight.Load()
		if n <= m || c.maxInFlight.CompareAndSwap(m, n) {
			return
		}
	}
}

// end marks one answer as finished. The outcome is counted before InFlight
// drops, so an observer that sees InFlight fall also sees the outcome.
func (c *counters) end(completed bool) {
	if completed {
		c.completed.Add(1)
	} else {
		c.cancelled.Add(1)
	}
	c.inFlight.Add(-1)
}

func (c *counters) snapshot() AccountStats {
	return AccountStats{
		InFlight:    c.inFlight.Load(),
		MaxInFlight: c.maxInFlight.Load(),
		Requests:    c.requests.Load(),
		Completed:   c.completed.Load(),
		Cancelled:   c.cancelled.Load(),
		Rejected:    c.rejected.Load(),
	}
}

// reset zeroes the totals and restarts the high-water mark at the current
// InFlight (answers in progress are still counted when they end).
func (c *counters) reset() {
	c.requests.Store(0)
	c.completed.Store(0)
	c.cancelled.Store(0)
	c.rejected.Store(0)
	c.maxInFlight.Store(c.inFlight.Load())
}
