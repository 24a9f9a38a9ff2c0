package actors

import (
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// routeKey names one candidate set: the accounts of a group serving a model,
// whatever protocol their provider speaks (the gateway translates between
// protocols, so every account serving the model can serve every client).
// Accounts that serve any model are filed under model "*".
type routeKey struct {
	group string
	model string
}

const anyModel = "*"

// lane is the group part of a routeKey.
func (k routeKey) lane() routeKey { return routeKey{group: k.group} }

// candidates is an indexed max-heap of the available accounts of one routeKey,
// ordered by score, then least recently granted. Membership counters cover
// every account filed under the key, available or not.
type candidates struct {
	slot    int // which verdict orders the heap: 0 the policy's, 1 the canary's
	items   []*entry
	pos     map[*entry]int // position in items of each available entry
	members int            // accounts filed under this key
	live    int            // members not in a terminal status (disabled, unauthorized, banned)
	// native counts, by client protocol (upstream.Endpoint), the members and
	// live members whose provider speaks that protocol itself, so a request
	// limited to them (AcquireRequest.Native) knows when none exists.
	native     [numEndpoints]int
	nativeLive [numEndpoints]int
}

// numEndpoints sizes arrays indexed by upstream.Endpoint (1..3).
const numEndpoints = int(upstream.EndpointMessages) + 1

// count adds d (+1 or -1) members of provider p to the membership counters;
// live says whether they count as live.
func (c *candidates) count(p storage.Provider, d int, live bool) {
	c.members += d
	if live {
		c.live += d
	}
	for ep := upstream.EndpointChat; int(ep) < numEndpoints; ep++ {
		if upstream.Supports(p, ep) {
			c.native[ep] += d
			if live {
				c.nativeLive[ep] += d
			}
		}
	}
}

// countLive moves a member of provider p between live and not live (d +1:
// it became live).
func (c *candidates) countLive(p storage.Provider, d int) {
	c.live += d
	for ep := upstream.EndpointChat; int(ep) < numEndpoints; ep++ {
		if upstream.Supports(p, ep) {
			c.nativeLive[ep] += d
		}
	}
}

func newCandidates(slot int) *candidates {
	return &candidates{slot: slot, pos: make(map[*entry]int)}
}

// better orders candidates: tier first (healthy before warm before risky),
// then score, then the policy's tie-break, then least recently granted, then
// join order.
// Slot sl picks the verdict compared (0: the policy's, 1: the canary's).
func better(a, b *entry, sl int) bool {
	va, vb := &a.v[sl], &b.v[sl]
	if va.scored.Tier != vb.scored.Tier {
		return va.scored.Tier < vb.scored.Tier
	}
	if va.scored.Score != vb.scored.Score {
		return va.scored.Score > vb.scored.Score
	}
	if va.tie != vb.tie {
		return va.tie > vb.tie
	}
	if a.lastGrant != b.lastGrant {
		return a.lastGrant < b.lastGrant
	}
	return a.idx < b.idx
}

func (c *candidates) len() int { return len(c.items) }

// set inserts e or restores heap order after its score changed.
func (c *candidates) set(e *entry) {
	if i, ok := c.pos[e]; ok {
		if !c.up(i) {
			c.down(i)
		}
		return
	}
	c.items = append(c.items, e)
	c.pos[e] = len(c.items) - 1
	c.up(len(c.items) - 1)
}

// remove deletes e if present.
func (c *candidates) remove(e *entry) {
	i, ok := c.pos[e]
	if !ok {
		return
	}
	last := len(c.items) - 1
	if i != last {
		c.swap(i, last)
	}
	c.items = c.items[:last]
	delete(c.pos, e)
	if i != last {
		if !c.up(i) {
			c.down(i)
		}
	}
}

func (c *candidates) swap(i, j int) {
	c.items[i], c.items[j] = c.items[j], c.items[i]
	c.pos[c.items[i]] = i
	c.pos[c.items[j]] = j
}

func (c *candidates) up(i int) bool {
	moved := false
	for i > 0 {
		p := (i - 1) / 2
		if !better(c.items[i], c.items[p], c.slot) {
			break
		}
		c.swap(i, p)
		i = p
		moved = true
	}
	return moved
}

func (c *candidates) down(i int) {
	n := len(c.items)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		best := l
		if r := l + 1; r < n && better(c.items[r], c.items[l], c.slot) {
			best = r
		}
		if !better(c.items[best], c.items[i], c.slot) {
			return
		}
		c.swap(i, best)
		i = best
	}
}

// fifo is a queue of parked acquire requests of one API key.
type fifo struct {
	items []*acquireState
	head  int
}

func (q *fifo) len() int { return len(q.items) - q.head }

func (q *fifo) push(r *acquireState) { q.items = append(q.items, r) }

func (q *fifo) peek() *acquireState { return q.items[q.head] }

func (q *fifo) pop() *acquireState {
	r := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head > 64 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items = q.items[:n]
		q.head = 0
	}
	return r
}

// prune drops requests that are no longer pending (abandoned by their caller).
func (q *fifo) prune() int {
	kept := q.items[:0]
	dropped := 0
	for _, r := range q.items[q.head:] {
		if r.state.Load() == acqPending {
			kept = append(kept, r)
		} else {
			dropped++
		}
	}
	clear(q.items[len(kept):])
	q.items = kept
	q.head = 0
	return dropped
}

// waitQueue holds the parked acquire requests of one routeKey and serves them
// fairly across API keys: FIFO within a key, and deficit round robin across
// keys, each key getting its Weight (default 1) turns per round. One busy key
// cannot starve the others however many requests it parks.
type waitQueue struct {
	byKey   map[string]*fifo
	ring    []string // keys with waiters, in service order
	next    int      // the ring position served next
	credit  int      // turns left for ring[next] in this round
	n       int
	weights map[string]int
}

func (q *waitQueue) len() int { return q.n }

func (q *waitQueue) push(r *acquireState) {
	if q.byKey == nil {
		q.byKey = make(map[string]*fifo)
		q.weights = make(map[string]int)
	}
	f := q.byKey[r.KeyID]
	if f == nil {
		f = &fifo{}
		q.byKey[r.KeyID] = f
		q.ring = append(q.ring, r.KeyID)
	}
	q.weights[r.KeyID] = max(r.Weight, 1)
	f.push(r)
	q.n++
}

// current returns the key served next and its queue.
func (q *waitQueue) current() (string, *fifo) {
	if q.next >= len(q.ring) {
		q.next = 0
	}
	k := q.ring[q.next]
	if q.credit <= 0 {
		q.credit = q.weights[k]
	}
	return k, q.byKey[k]
}

func (q *waitQueue) peek() *acquireState {
	_, f := q.current()
	return f.peek()
}

func (q *waitQueue) pop() *acquireState {
	k, f := q.current()
	r := f.pop()
	q.n--
	q.credit--
	if f.len() == 0 {
		q.dropKey(q.next, k)
		return r
	}
	if q.credit <= 0 {
		q.next++
	}
	return r
}

// dropKey removes the key at ring position i; the next key takes its turn.
func (q *waitQueue) dropKey(i int, k string) {
	delete(q.byKey, k)
	delete(q.weights, k)
	q.ring = append(q.ring[:i], q.ring[i+1:]...)
	q.credit = 0
	if q.next > i {
		q.next--
	}
}

// each calls fn for every parked request.
func (q *waitQueue) each(fn func(*acquireState)) {
	for _, f := range q.byKey {
		for _, r := range f.items[f.head:] {
			fn(r)
		}
	}
}

// prune drops requests that are no longer pending and keys left empty.
func (q *waitQueue) prune() int {
	dropped := 0
	for i := 0; i < len(q.ring); {
		k := q.ring[i]
		f := q.byKey[k]
		dropped += f.prune()
		if f.len() == 0 {
			q.dropKey(i, k)
			continue
		}
		i++
	}
	q.n -= dropped
	return dropped
}

// recheckItem is a pending rescore of e at due; gen must still match e.recheck.
type recheckItem struct {
	due time.Time
	e   *entry
	gen uint64
}

// recheckHeap is a min-heap of rechecks by due time (container/heap).
type recheckHeap []recheckItem

func (h recheckHeap) Len() int           { return len(h) }
func (h recheckHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h recheckHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *recheckHeap) Push(x any)        { *h = append(*h, x.(recheckItem)) }
func (h *recheckHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = recheckItem{}
	*h = old[:len(old)-1]
	return it
}
