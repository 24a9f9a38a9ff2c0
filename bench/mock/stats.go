package mock

import "sync/atomic"

// AccountStats is a snapshot of the request counters of one account (or of
// the whole fleet, see Fleet.TotalStats). Only answer requests (chat
// completions, responses, codex responses) are counted; model listings and
// requests that fail authentication are not.
//
// Every accepted request ends as exactly one of Completed, Cancelled or
// Faults, so between resets
//
//	Requests == Rejected + Completed + Cancelled + Faults + InFlight.
type AccountStats struct {
	// InFlight is the number of answers being produced right now, faulted
	// ones included: incremented when a request is accepted (authenticated and
	// valid), decremented once when its answer ends for any reason; an
	// answer delivered in full ends just before its last bytes are written,
	// so a client that holds the whole answer never finds it in flight.
	InFlight int64
	// MaxInFlight is the high-water mark of InFlight since the account was
	// added or since the last ResetStats.
	MaxInFlight int64
	// Requests is the number of requests authenticated as this account.
	Requests int64
	// Completed is the number of normal answers fully delivered (for a
	// stream: every event before the last was flushed, the last one is
	// being written; for JSON: the body was handed to the server). A slow_first_token answer the client waited for is Completed:
	// the fault only delayed it.
	Completed int64
	// Cancelled is the number of normal answers that ended early: the client
	// went away mid-stream, or the fleet was closed.
	Cancelled int64
	// Faults is the number of requests on which the account's Fault fired
	// (see Fault), whatever then happened on the wire: the error status, the
	// cut connection, the hang the client gave up on. The one exception is a
	// slow_first_token answer delivered in full, which is Completed.
	Faults int64
	// Rejected is the number of authenticated requests answered with an error
	// status caused by the request itself, before any answer started
	// (malformed JSON, unknown model, codex stream/store violations). Injected
	// faults are never Rejected.
	Rejected int64
}

// counters are the live, lock-free counterpart of AccountStats.
type counters struct {
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	requests    atomic.Int64
	completed   atomic.Int64
	cancelled   atomic.Int64
	faults      atomic.Int64
	rejected    atomic.Int64
}

// outcome is how one accepted request ended.
type outcome uint8

const (
	outCompleted outcome = iota // a normal answer, fully delivered
	outCancelled                // a normal answer cut short by the client or Close
	outFaulted                  // the account's fault fired
)

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
func (c *counters) end(o outcome) {
	switch o {
	case outCompleted:
		c.completed.Add(1)
	case outCancelled:
		c.cancelled.Add(1)
	default:
		c.faults.Add(1)
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
		Faults:      c.faults.Load(),
		Rejected:    c.rejected.Load(),
	}
}

// reset zeroes the totals and restarts the high-water mark at the current
// InFlight (answers in progress are still counted when they end).
func (c *counters) reset() {
	c.requests.Store(0)
	c.completed.Store(0)
	c.cancelled.Store(0)
	c.faults.Store(0)
	c.rejected.Store(0)
	c.maxInFlight.Store(c.inFlight.Load())
}
