package gateway

// transcript is the response state one downstream WebSocket connection
// holds, so that a continuation (previous_response_id plus only the new
// input items) works whichever account serves it, store:false included:
// for each recent response, every item the model has seen and said up to
// it — the expanded input of its request followed by its output items.
// It belongs to the connection's goroutine; not safe for concurrent use.
type transcript struct {
	turns []turn // oldest first, at most maxTurns
	bytes int    // sum of len(items)
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

// add records response id; the oldest turns go when a bound is reached. A
// single transcript above maxTranscriptBytes is not kept (a continuation of
// it then needs the account that holds it).
func (t *transcript) add(id string, items []byte, account string) {
	if id == "" || len(items) > maxTranscriptBytes {
		return
	}
	t.turns = append(t.turns, turn{id: id, items: items, account: account})
	t.bytes += len(items)
	for len(t.turns) > maxTurns || t.bytes > maxTranscriptBytes {
		t.bytes -= len(t.turns[0].items)
		t.turns[0] = turn{}
		t.turns = t.turns[1:]
	}
}
