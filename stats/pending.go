package stats

import (
	"cmp"
	"hash/maphash"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/upstream"
)

// Stored keys: what an attempt_stats row counts (storage.AttemptCount.Key).
// They are the in-memory keys (tally.go) except tokens, which are stored
// as one sum a kind rather than base-2^19 digits. Rows outlive releases,
// so these numbers never change meaning: a new status code or failure
// class takes a key nobody used.
//
//	0..15     failure class (upstream.Class; 0 is a success)
//	16..43    HTTP status (statusCodes, then "1xx".."5xx" and "other")
//	48..51    tokens: input, output, cache read, cache write (N is the sum)
//	64..179   latency bin (bin: 4 an octave of microseconds)
//	180..295  TTFT bin
const storedTokens = keyTokens // + kind

// The pending batch holds the counts recorded since the last Flush by row:
// a row is one (scope, subject, hour), found with one map lookup, and its
// cells — one a stored key, its count packed beside it in a uint64 — sit
// in blocks of blockCells in one slab, chained when a row outgrows its
// first. An attempt is so two lookups (its account's row and its
// provider's) however many keys it counts, and an account's hour of three
// attempts (about 11 cells) takes its map entry and two blocks (about 200
// bytes) instead of 11 map entries of 60–100 bytes. The slab holds no
// pointers, so the GC does not scan it.

// maxPending bounds the pending batch, in blocks (64 bytes each, and each
// row has at least one, so rows are bounded too): while storage is
// unreachable the batch keeps growing until then, and drops the counts
// that need a new block (a new row's or a full row's) after. 1<<17 blocks
// are 8 MiB of slab and, at most, as many rows' map entries: 20 MiB of heap
// when every row has one cell (measured), and at the gateway's spread
// (about 11 cells in two blocks an account-hour) some 65,000
// account-hours, 720,000 cells. (The bound used to be 1<<18 cells of
// about 100 bytes each in a map.)
const maxPending = 1 << 17

const (
	blockCells = 7 // cells a block: with the link, 64 bytes
	cellBits   = 64 - keyWidth
	keyWidth   = 10               // stored keys are below 1<<keyWidth (storage.MaxStatsKey + 1)
	cellMax    = 1<<cellBits - 1  // a cell's largest count; a larger one opens a second cell of the key
	cellKey    = ^uint64(cellMax) // the key bits of a cell
)

// block is up to blockCells cells of one row, the used ones first (a cell
// is key<<cellBits | count, never 0 since counts are positive; 0 is a free
// cell), and the index of the row's next block in the slab (0: none; a
// row's first block is never another's next).
type block struct {
	c    [blockCells]uint64
	next uint32
}

// rowKey is a pending row: its scope, subject and hour.
type rowKey struct {
	subject string
	hour    int64 // Unix seconds of the start of the UTC hour
	scope   storage.StatsScope
}

// numShards is the number of parts the pending batch is split into, each
// with its own mutex, map and slab: an attempt counts into its account's
// shard (shardOf), its provider's row too, so concurrent releases of
// different accounts rarely wait for each other, where one mutex for the
// whole batch was among the lock waits of every closed-loop profile
// (docs/benchmarks.md, "the attempt statistics' lock, sharded"). A
// provider's row is so kept in up to numShards parts, added up by take.
const numShards = 8

// shardSeed hashes subjects to shards; it is set once, at start.
var shardSeed = maphash.MakeSeed()

// shardOf is the shard of an account's counts (or of a row handed back by
// putBack, by its subject).
func shardOf(subject string) int {
	return int(maphash.String(shardSeed, subject) & (numShards - 1))
}

// pending is the batch of counts recorded since the last Flush, in
// numShards shards. Its bound is the whole batch's: the shards' blocks
// together are at most maxPending.
type pending struct {
	shards  [numShards]shard
	_       [64]byte     // used on a cache line of its own
	used    atomic.Int64 // blocks in the shards' slabs
	dropped atomic.Uint64
}

// shard is one part of the pending batch.
type shard struct {
	mu     sync.Mutex
	rows   map[rowKey]uint32 // row → its first block; nil after a take, until the next count
	blocks []block           // the slab
	cells  int               // cells in use
	// The last batch's rows and blocks: the next batch's sizes, so it does
	// not grow its map and slab step by step.
	lastRows, lastBlocks int
	_                    [64]byte // a shard's mutex and its neighbour's on distinct cache lines
}

// row returns the first block of r, making it; ok is false when the bound
// leaves no block for a new row. sh.mu is held.
func (p *pending) row(sh *shard, r rowKey) (b uint32, ok bool) {
	if b, ok := sh.rows[r]; ok {
		return b, true
	}
	if sh.rows == nil {
		sh.rows = make(map[rowKey]uint32, sh.lastRows)
		sh.blocks = make([]block, 0, max(sh.lastBlocks, 1))
	}
	if b, ok = p.block(sh); ok {
		sh.rows[r] = b
	}
	return b, ok
}

// block appends an empty block to sh's slab and returns its index; ok is
// false at the bound. sh.mu is held.
func (p *pending) block(sh *shard) (b uint32, ok bool) {
	if p.used.Add(1) > maxPending {
		p.used.Add(-1)
		return 0, false
	}
	sh.blocks = append(sh.blocks, block{})
	return uint32(len(sh.blocks) - 1), true
}

// add counts n more of key in the row whose first block is b in sh; sh.mu
// is held. n ≤ 0 counts nothing (counts are positive). A count that needs
// a new block at the bound is dropped, and counted in p.dropped.
func (p *pending) add(sh *shard, b uint32, key uint16, n int64) {
	if n <= 0 {
		return
	}
	k := uint64(key) << cellBits
	for {
		bl := &sh.blocks[b]
		for i := range bl.c {
			c := bl.c[i]
			switch {
			case c == 0: // the row's first free cell: the key has none with room
				v := min(uint64(n), cellMax)
				bl.c[i] = k | v
				sh.cells++
				if n -= int64(v); n == 0 {
					return
				}
			case c&cellKey == k:
				room := cellMax - c&cellMax
				if uint64(n) <= room {
					bl.c[i] = c + uint64(n)
					return
				}
				bl.c[i] = c + room
				n -= int64(room)
			}
		}
		if bl.next == 0 {
			nb, ok := p.block(sh) // may move the slab: bl is stale after it
			if !ok {
				p.dropped.Add(1)
				return
			}
			sh.blocks[b].next = nb
		}
		b = sh.blocks[b].next
	}
}

// hourOf is the start of at's UTC hour, in Unix seconds.
func hourOf(at time.Time) int64 {
	u := at.Unix()
	return u - (u%3600+3600)%3600 // floored: hours before 1970 too
}

// attempt counts a under account and provider, in shard sh (account's,
// shardOf), and with it the tokens tk (nil: none), under one take of the
// shard's lock.
func (p *pending) attempt(at time.Time, sh int, account, provider string, a Attempt, tk *Tokens) {
	var keys [4]uint16
	k := keys[:0]
	k = append(k, uint16(keyClass+classKey(a.Class)), uint16(keyStatus+statusKey(a.Status)))
	if a.Latency > 0 {
		k = append(k, uint16(keyLatency+bin(a.Latency)))
	}
	if a.TTFT > 0 {
		k = append(k, uint16(keyTTFT+bin(a.TTFT)))
	}
	var v [tokenKinds]int64
	if tk != nil {
		v = [tokenKinds]int64{tk.Input, tk.Output, tk.CacheRead, tk.CacheWrite}
	}
	h := hourOf(at)
	part := &p.shards[sh]
	part.mu.Lock()
	defer part.mu.Unlock()
	for _, r := range [2]rowKey{{account, h, storage.StatsAccount}, {provider, h, storage.StatsProvider}} {
		b, ok := p.row(part, r)
		if !ok {
			p.dropped.Add(uint64(len(k)))
		} else {
			for _, key := range k {
				p.add(part, b, key, 1)
			}
		}
		p.addTokens(part, b, ok, &v)
	}
}

// tokens counts t under account and provider, in shard sh (account's,
// shardOf).
func (p *pending) tokens(at time.Time, sh int, account, provider string, t Tokens) {
	v := [tokenKinds]int64{t.Input, t.Output, t.CacheRead, t.CacheWrite}
	if v == [tokenKinds]int64{} {
		return
	}
	h := hourOf(at)
	part := &p.shards[sh]
	part.mu.Lock()
	defer part.mu.Unlock()
	for _, r := range [2]rowKey{{account, h, storage.StatsAccount}, {provider, h, storage.StatsProvider}} {
		b, ok := p.row(part, r)
		p.addTokens(part, b, ok, &v)
	}
}

// addTokens counts the positive token counts v in the row whose first
// block is b in sh, or, when the row could not be made (ok false), counts
// each as dropped. sh.mu is held.
func (p *pending) addTokens(sh *shard, b uint32, ok bool, v *[tokenKinds]int64) {
	for k, n := range v {
		switch {
		case n <= 0:
		case !ok:
			p.dropped.Add(1)
		default:
			p.add(sh, b, uint16(storedTokens+k), n)
		}
	}
}

// cells is the number of cells in use in every shard: a provider's row
// counts once for each shard that holds a part of it.
func (p *pending) cells() int {
	n := 0
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		n += sh.cells
		sh.mu.Unlock()
	}
	return n
}

// take empties the batch and returns its counts in storage's order: by
// scope, subject (bytewise), hour and key, one a row (two or more only for
// a count past cellMax), a provider's parts in several shards added up.
// storage.CoalesceAttemptCounts sorts them again, and a sorted slice costs
// its sort one pass. An attempt recorded before take began is in it. What
// the batch held is left to the GC: each shard's next batch is allocated
// at its first count, at this one's size.
func (p *pending) take() []storage.AttemptCount {
	type row struct {
		rowKey
		b  uint32
		sh uint8
	}
	var slabs [numShards][]block
	var rows [numShards]map[rowKey]uint32
	nrows, cells := 0, 0
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		rows[i], slabs[i] = sh.rows, sh.blocks
		cells += sh.cells
		sh.lastRows, sh.lastBlocks = len(sh.rows), len(sh.blocks)
		sh.rows, sh.blocks, sh.cells = nil, nil, 0
		p.used.Add(-int64(len(slabs[i])))
		sh.mu.Unlock()
		nrows += len(rows[i])
	}
	rs := make([]row, 0, nrows)
	for i, m := range rows {
		for r, b := range m {
			rs = append(rs, row{r, b, uint8(i)})
		}
	}
	slices.SortFunc(rs, func(x, y row) int {
		if x.scope != y.scope {
			return cmp.Compare(x.scope, y.scope)
		}
		if c := strings.Compare(x.subject, y.subject); c != 0 {
			return c
		}
		return cmp.Compare(x.hour, y.hour)
	})
	out := make([]storage.AttemptCount, 0, cells)
	var cs []uint64 // a row's cells, sorted by key (the key is their top bits)
	for i := 0; i < len(rs); {
		cs = cs[:0]
		j := i
		for ; j < len(rs) && rs[j].rowKey == rs[i].rowKey; j++ { // the row's parts: one a shard
			blocks := slabs[rs[j].sh]
			for b := rs[j].b; ; {
				bl := &blocks[b]
				for _, c := range &bl.c {
					if c == 0 {
						break
					}
					cs = append(cs, c)
				}
				if bl.next == 0 {
					break
				}
				b = bl.next
			}
		}
		slices.Sort(cs)
		if j-i > 1 {
			cs = sumCells(cs)
		}
		r := rs[i]
		hour := time.Unix(r.hour, 0).UTC()
		for _, c := range cs {
			out = append(out, storage.AttemptCount{Scope: r.scope, Subject: r.subject, Hour: hour, Key: int(c >> cellBits), N: int64(c & cellMax)})
		}
		i = j
	}
	return out
}

// sumCells adds up, in place, the cells of a key in cs (sorted), as far as
// a cell holds: a key's count past cellMax stays in more than one cell.
func sumCells(cs []uint64) []uint64 {
	out := cs[:0]
	for _, c := range cs {
		if n := len(out); n > 0 && out[n-1]&cellKey == c&cellKey {
			last := out[n-1]
			room := cellMax - last&cellMax
			if c&cellMax <= room {
				out[n-1] = last + c&cellMax
				continue
			}
			out[n-1] = last + room
			c -= room
		}
		out = append(out, c)
	}
	return out
}

// putBack returns counts that could not be stored to the batch, each
// row's to the shard of its subject.
func (p *pending) putBack(cs []storage.AttemptCount) {
	var last rowKey
	var sh *shard
	var b uint32
	ok := false
	for _, c := range cs {
		// take hands a row's counts out together: one lookup a row.
		if r := (rowKey{c.Subject, c.Hour.Unix(), c.Scope}); sh == nil || r != last {
			if next := &p.shards[shardOf(r.subject)]; next != sh {
				if sh != nil {
					sh.mu.Unlock()
				}
				sh = next
				sh.mu.Lock()
			}
			last = r
			b, ok = p.row(sh, r)
		}
		switch {
		case c.N <= 0:
		case !ok:
			p.dropped.Add(1)
		default:
			p.add(sh, b, uint16(c.Key), c.N)
		}
	}
	if sh != nil {
		sh.mu.Unlock()
	}
}

// classKey is a's class within the class keys: classes past their range
// (none today) count as transient.
func classKey(c upstream.Class) uint32 {
	if uint32(c) >= keyStatus-keyClass {
		return uint32(upstream.ClassTransient)
	}
	return uint32(c)
}
