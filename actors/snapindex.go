package actors

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// snapShards is the number of shards of a snapIndex: a put or a removal
// copies one shard, about n/512 entries of 24 bytes (40 at 10,000
// accounts, 390 at 100,000).
const snapShards = 512

// snapSeed hashes account IDs to shards; set once at package init.
var snapSeed = maphash.MakeSeed()

// snapIndex is the readers' index of the accounts whose actors run here:
// account ID → the snapshot their actor publishes into
// (accountConfig.snapshot), and the pool's index of their mailboxes. System.View (on the affinity path of a
// request), EachView and Views read it without a lock: each shard is an
// immutable slice sorted by ID behind an atomic pointer, which a writer
// replaces with a changed copy. Only the pool actor writes (put, stop);
// mu orders writers all the same. A reader iterating (each) never holds
// anything, so its function may read the index (System.View in EachView's
// callback) while the pool writes.
//
// It replaces a sync.Map, whose trie nodes, entry nodes and boxed keys
// were 123 bytes an account of live heap, and the pool's map of mailboxes
// (43 bytes an account; docs/benchmarks.md, issue 21): an entry here is 32
// bytes, and a shard's slice is sized to its entries.
// The zero value is an empty index.
type snapIndex struct {
	mu     sync.Mutex // serialises writers
	shards [snapShards]atomic.Pointer[[]snapEntry]
}

// snapEntry is one account in a shard: its ID (the key, which the
// account's config may not provide race-free: the actor replaces its
// account on an update), its snapshot and its actor's mailbox (nil before
// the actor is spawned and after the pool stopped them all: read by the
// pool only).
type snapEntry struct {
	id   string
	snap *snapshot
	box  *mailbox
}

func cmpSnapEntry(e snapEntry, id string) int { return strings.Compare(e.id, id) }

// shard returns the shard that holds id.
func (x *snapIndex) shard(id string) *atomic.Pointer[[]snapEntry] {
	return &x.shards[maphash.String(snapSeed, id)%snapShards]
}

// load returns id's snapshot; false when id is not in the index.
func (x *snapIndex) load(id string) (*snapshot, bool) {
	p := x.shard(id).Load()
	if p == nil {
		return nil, false
	}
	es := *p
	if i, ok := slices.BinarySearchFunc(es, id, cmpSnapEntry); ok {
		return es[i].snap, true
	}
	return nil, false
}

// mailbox returns the mailbox of id's actor; nil when it has none.
func (x *snapIndex) mailbox(id string) *mailbox {
	p := x.shard(id).Load()
	if p == nil {
		return nil
	}
	es := *p
	if i, ok := slices.BinarySearchFunc(es, id, cmpSnapEntry); ok {
		return es[i].box
	}
	return nil
}

// store makes s id's snapshot and box its mailbox, in place of any it had.
func (x *snapIndex) store(id string, s *snapshot, box *mailbox) {
	x.mu.Lock()
	defer x.mu.Unlock()
	sh := x.shard(id)
	var old []snapEntry
	if p := sh.Load(); p != nil {
		old = *p
	}
	i, found := slices.BinarySearchFunc(old, id, cmpSnapEntry)
	n := len(old)
	if !found {
		n++
	}
	es := make([]snapEntry, n)
	copy(es, old[:i])
	es[i] = snapEntry{id: id, snap: s, box: box}
	if found {
		copy(es[i+1:], old[i+1:])
	} else {
		copy(es[i+1:], old[i:])
	}
	sh.Store(&es)
}

// delete takes id out of the index (nothing when it is not in it).
func (x *snapIndex) delete(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	sh := x.shard(id)
	p := sh.Load()
	if p == nil {
		return
	}
	old := *p
	i, found := slices.BinarySearchFunc(old, id, cmpSnapEntry)
	if !found {
		return
	}
	if len(old) == 1 {
		sh.Store(nil)
		return
	}
	es := make([]snapEntry, 0, len(old)-1)
	es = append(append(es, old[:i]...), old[i+1:]...)
	sh.Store(&es)
}

// each calls fn with every snapshot in the index, in no order, until fn
// returns false. An account put or removed meanwhile may be seen or not.
func (x *snapIndex) each(fn func(*snapshot) bool) {
	for i := range x.shards {
		p := x.shards[i].Load()
		if p == nil {
			continue
		}
		for _, e := range *p {
			if !fn(e.snap) {
				return
			}
		}
	}
}

// eachMailbox calls fn with every account's ID and mailbox, for those
// that have one, in no order.
func (x *snapIndex) eachMailbox(fn func(id string, box *mailbox)) {
	for i := range x.shards {
		if p := x.shards[i].Load(); p != nil {
			for _, e := range *p {
				if e.box != nil {
					fn(e.id, e.box)
				}
			}
		}
	}
}

// dropMailboxes forgets every mailbox, keeping the snapshots (the pool
// stopping them all), and returns them.
func (x *snapIndex) dropMailboxes() []*mailbox {
	x.mu.Lock()
	defer x.mu.Unlock()
	var boxes []*mailbox
	for i := range x.shards {
		p := x.shards[i].Load()
		if p == nil {
			continue
		}
		es := slices.Clone(*p)
		for j := range es {
			if es[j].box != nil {
				boxes = append(boxes, es[j].box)
				es[j].box = nil
			}
		}
		x.shards[i].Store(&es)
	}
	return boxes
}

// len is the number of accounts in the index (a moment's count while the
// pool writes).
func (x *snapIndex) len() int {
	n := 0
	for i := range x.shards {
		if p := x.shards[i].Load(); p != nil {
			n += len(*p)
		}
	}
	return n
}
