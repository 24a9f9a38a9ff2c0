package memcache

// ckey names a counter: the caller's key and the window length in
// nanoseconds. Entries and leases are named by the key alone, which keeps
// their maps on the runtime's fast string-key path.
type ckey struct {
	key string
	win int64
}

// item is one entry, counter or lease. exp is the Unix time in nanoseconds at
// which it stops existing; idx is its position in the table's heap.
type item struct {
	key string
	win int64  // counter: the window length in nanoseconds
	val string // entry: the value; lease: the owner
	n   int64  // counter: the window's total
	exp int64
	idx int
}

// table is a map of items plus a min-heap of the same items ordered by
// expiry, so that the soonest-expiring item is found in O(1) and expired
// items are dropped in O(expired · log n) without scanning. A table is not
// safe for concurrent use; its shard's lock guards it.
type table[K comparable] struct {
	m   map[K]*item
	h   []*item
	key func(*item) K
}

func newTable[K comparable](key func(*item) K) table[K] {
	return table[K]{m: make(map[K]*item), key: key}
}

func itemKey(it *item) string { return it.key }

func counterKey(it *item) ckey { return ckey{it.key, it.win} }

func (t *table[K]) len() int { return len(t.h) }

// insert adds it, which must not be in the table.
func (t *table[K]) insert(it *item) {
	it.idx = len(t.h)
	t.h = append(t.h, it)
	t.up(it.idx)
	t.m[t.key(it)] = it
}

// remove deletes it, which must be in the table.
func (t *table[K]) remove(it *item) {
	i, n := it.idx, len(t.h)-1
	if i != n {
		t.swap(i, n)
		if !t.down(i, n) {
			t.up(i)
		}
	}
	t.h[n] = nil
	t.h = t.h[:n]
	delete(t.m, t.key(it))
	it.idx = -1
}

// setExp changes it's expiry and restores the heap order.
func (t *table[K]) setExp(it *item, exp int64) {
	if it.exp == exp {
		return
	}
	it.exp = exp
	if !t.down(it.idx, len(t.h)) {
		t.up(it.idx)
	}
}

// first returns the item that expires soonest, or nil when empty.
func (t *table[K]) first() *item {
	if len(t.h) == 0 {
		return nil
	}
	return t.h[0]
}

// expire removes up to limit items whose expiry is at or before now and
// returns how many it removed.
func (t *table[K]) expire(now int64, limit int) int {
	n := 0
	for n < limit && len(t.h) > 0 && t.h[0].exp <= now {
		t.remove(t.h[0])
		n++
	}
	if c := cap(t.h); c > 1024 && len(t.h) < c/4 {
		t.h = append(make([]*item, 0, c/2), t.h...)
	}
	return n
}

func (t *table[K]) swap(i, j int) {
	t.h[i], t.h[j] = t.h[j], t.h[i]
	t.h[i].idx = i
	t.h[j].idx = j
}

func (t *table[K]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if t.h[i].exp <= t.h[j].exp {
			break
		}
		t.swap(i, j)
		j = i
	}
}

// down sifts the item at i0 down within h[:n] and reports whether it moved.
func (t *table[K]) down(i0, n int) bool {
	i := i0
	for {
		l := 2*i + 1
		if l >= n || l < 0 {
			break
		}
		j := l
		if r := l + 1; r < n && t.h[r].exp < t.h[l].exp {
			j = r
		}
		if t.h[i].exp <= t.h[j].exp {
			break
		}
		t.swap(i, j)
		i = j
	}
	return i > i0
}
