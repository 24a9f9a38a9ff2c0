package gateway

import "sync/atomic"

// transcript is the response state one downstream WebSocket connection
// holds, so that a continuation (previous_response_id plus only the new
// input items) works whichever account serves it, store:false included:
// for each recent response, every item the model has seen and said up to
// it — the expanded input of its request followed by its output items.
// It belongs to the connection's goroutine; not safe for concurrent use.
type transcript struct {
	turns []turn // oldest first, at most maxTurns
	bytes int    // sum of len(items)
	// budget is the instance's, shared by every connection's transcript;
	// nil: no bound but the connection's own.
	budget *transcriptBudget
}

// transcriptBudget bounds the bytes the transcripts of all client
// connections hold together (WSConfig.MaxTranscriptBytes): a warm-up is
// answered by the gateway itself, unbilled and outside the key's limits,
// so without it each connection could hold maxTranscriptBytes for free,
// 64 connections a key. The value is the bytes held. Safe for
// concurrent use.
type transcriptBudget struct {
	atomic.Int64
	max atomic.Int64 // 0: unbounded
}

// take reserves n bytes; false when they do not fit.
func (b *transcriptBudget) take(n int) bool {
	if b == nil {
		return true
	}
	for {
		used, max := b.Load(), b.max.Load()
		if max > 0 && used+int64(n) > max {
			return false
		}
		if b.CompareAndSwap(used, used+int64(n)) {
			return true
		}
	}
}

// give returns n bytes taken.
func (b *transcriptBudget) give(n int) {
	if b != nil {
		b.Add(-int64(n))
	}
}

// turn is one response of the connection.
type turn struct {
	id      string
	items   []byte // JSON array: input items then output items
	account string // the account that served it ("" for a local warm-up)
}

// Bounds on what a connection keeps: the chains the clients build only ever
// continue the latest responses, so a few are enough.
const (
	maxTurns           = 8
	maxTranscriptBytes = 64 << 20
)

// get returns the turn of response id, or nil.
func (t *transcript) get(id string) *turn {
	for i := len(t.turns) - 1; i >= 0; i-- {
		if t.turns[i].id == id {
			return &t.turns[i]
		}
	}
	return nil
}

// add records response id; the oldest turns go when a bound is reached:
// the connection's own (maxTurns, maxTranscriptBytes), then the
// instance's budget. A turn that does not fit even alone is not kept (a
// continuation of it then goes upstream as the client wrote it, to the
// account that holds it).
func (t *transcript) add(id string, items []byte, account string) {
	if id == "" || len(items) > maxTranscriptBytes {
		return
	}
	for len(t.turns) > 0 && (len(t.turns) >= maxTurns || t.bytes+len(items) > maxTranscriptBytes) {
		t.dropOldest()
	}
	for !t.budget.take(len(items)) {
		if len(t.turns) == 0 {
			return
		}
		t.dropOldest()
	}
	t.turns = append(t.turns, turn{id: id, items: items, account: account})
	t.bytes += len(items)
}

// dropOldest forgets the oldest turn and gives its bytes back.
func (t *transcript) dropOldest() {
	n := len(t.turns[0].items)
	t.bytes -= n
	t.budget.give(n)
	t.turns[0] = turn{}
	t.turns = t.turns[1:]
}

// reset forgets every turn and gives their bytes back (the connection's
// end).
func (t *transcript) reset() {
	t.budget.give(t.bytes)
	clear(t.turns)
	t.turns, t.bytes = nil, 0
}
