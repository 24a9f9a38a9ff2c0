package actors

import "github.com/troupe-gw/troupe/upstream"

// routeKey names one candidate set: the accounts that speak an endpoint, in a
// group, serving a model. Accounts that serve any model are filed under model "*".
type routeKey struct {
	endpoint upstream.Endpoint
	group    string
	model    string
}

const anyModel = "*"

// lane is the (endpoint, group) part of a routeKey.
func (k routeKey) lane() routeKey { return routeKey{endpoint: k.endpoint, group: k.group} }

// candidates is an indexed max-heap of the available accounts of one routeKey,
// ordered by score, then least recently granted. Membership counters cover
// every account filed under the key, available or not.
type candidates struct {
	items   []*entry
	pos     map[*entry]int // position in items of each available entry
	members int            // accounts filed under this key
	live    int            // members not in a terminal status (disabled, unauthorized, banned)
}

func newCandidates() *candidates { return &candidates{pos: make(map[*entry]int)} }

func better(a, b *entry) bool {
	if a.score != b.score {
		return a.score > b.score
	}
	if a.lastGrant != b.lastGrant {
		return a.lastGrant < b.lastGrant
	}
	return a.idx < b.idx
}

func (c *candidates) len() int { return len(c.items) }

func (c *candidates) contains(e *entry) bool { _, ok := c.pos[e]; return ok }

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

// pop removes and returns the best entry.
func (c *candidates) pop() *entry {
	e := c.items[0]
	c.remove(e)
	return e
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
		if !better(c.items[i], c.items[p]) {
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
		if r := l + 1; r < n && better(c.items[r], c.items[l]) {
			best = r
		}
		if !better(c.items[best], c.items[i]) {
			return
		}
		c.swap(i, best)
		i = best
	}
}

// waitQueue is a FIFO of parked acquire requests for one routeKey.
type waitQueue struct {
	items []*acquireState
	head  int
}

func (q *waitQueue) len() int { return len(q.items) - q.head }

func (q *waitQueue) push(r *acquireState) { q.items = append(q.items, r) }

func (q *waitQueue) peek() *acquireState { return q.items[q.head] }

func (q *waitQueue) pop() *acquireState {
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
func (q *waitQueue) prune() int {
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
