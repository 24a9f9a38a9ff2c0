package actors

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
