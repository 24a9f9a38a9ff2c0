package stats

import (
	"cmp"
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

// pending is the batch of counts recorded since the last Flush.
type pending struct {
	mu     sync.Mutex
	rows   map[rowKey]uint32 // row → its first block; nil after a Flush, until the next count
	blocks []block           // the slab
	cells  int               // cells in use
	// The last batch's rows and blocks: the next batch's sizes, so it does
	// not grow its map and slab step by step.
	lastRows, lastBlocks int
	dropped              atomic.Uint64
}

// row returns the first block of r, making it; ok is false when the bound
// leaves no block for a new row.
func (p *pending) row(r rowKey) (b uint32, ok bool) {
	if b, ok := p.rows[r]; ok {
		return b, true
	}
	if p.rows == nil {
		p.rows = make(map[rowKey]uint32, p.lastRows)
		p.blocks = make([]block, 0, max(p.lastBlocks, 1))
	}
	if b, ok = p.block(); ok {
		p.rows[r] = b
	}
	return b, ok
}

// block appends an empty block to the slab and returns its index; ok is
// false at the bound.
func (p *pending) block() (b uint32, ok bool) {
	if len(p.blocks) >= maxPending {
		return 0, false
	}
	p.blocks = append(p.blocks, block{})
	return uint32(len(p.blocks) - 1), true
}

// add counts n more of key in the row whose first block is b; p.mu is
// held. n ≤ 0 counts nothing (counts are positive). A count that needs a
// new block at the bound is dropped, and counted in p.dropped.
func (p *pending) add(b uint32, key uint16, n int64) {
	if n <= 0 {
		return
	}
	k := uint64(key) << cellBits
	for {
		bl := &p.blocks[b]
		for i := range bl.c {
			c := bl.c[i]
			switch {
			case c == 0: // the row's first free cell: the key has none with room
				v := min(uint64(n), cellMax)
				bl.c[i] = k | v
				p.cells++
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
			nb, ok := p.block() // may move the slab: bl is stale after it
			if !ok {
				p.dropped.Add(1)
				return
			}
			p.blocks[b].next = nb
		}
		b = p.blocks[b].next
	}
}

// hourOf is the start of at's UTC hour, in Unix seconds.
func hourOf(at time.Time) int64 {
	u := at.Unix()
	return u - (u%3600+3600)%3600 // floored: hours before 1970 too
}

// attempt counts a under account and provider.
func (p *pending) attempt(at time.Time, account, provider string, a Attempt) {
	var keys [4]uint16
	k := keys[:0]
	k = append(k, uint16(keyClass+classKey(a.Class)), uint16(keyStatus+statusKey(a.Status)))
	if a.Latency > 0 {
		k = append(k, uint16(keyLatency+bin(a.Latency)))
	}
	if a.TTFT > 0 {
		k = append(k, uint16(keyTTFT+bin(a.TTFT)))
	}
	h := hourOf(at)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range [2]rowKey{{account, h, storage.StatsAccount}, {provider, h, storage.StatsProvider}} {
		b, ok := p.row(r)
		if !ok {
			p.dropped.Add(uint64(len(k)))
			continue
		}
		for _, key := range k {
			p.add(b, key, 1)
		}
	}
}

// tokens counts t under account and provider.
func (p *pending) tokens(at time.Time, account, provider string, t Tokens) {
	v := [tokenKinds]int64{t.Input, t.Output, t.CacheRead, t.CacheWrite}
	if v == [tokenKinds]int64{} {
		return
	}
	h := hourOf(at)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range [2]rowKey{{account, h, storage.StatsAccount}, {provider, h, storage.StatsProvider}} {
		b, ok := p.row(r)
		for k, n := range v {
			switch {
			case n <= 0:
			case !ok:
				p.dropped.Add(1)
			default:
				p.add(b, uint16(storedTokens+k), n)
			}
		}
	}
}

// take empties the batch and returns its counts in storage's order: by
// scope, subject (bytewise), hour and key, one a row (two or more only for
// a count past cellMax). storage.CoalesceAttemptCounts sorts them again,
// and a sorted slice costs its sort one pass. What the
// batch held is left to the GC: the next one is allocated at its first
// count, at this one's size.
func (p *pending) take() []storage.AttemptCount {
	p.mu.Lock()
	rows, blocks, cells := p.rows, p.blocks, p.cells
	p.rows, p.blocks, p.cells = nil, nil, 0
	p.lastRows, p.lastBlocks = len(rows), len(blocks)
	p.mu.Unlock()
	type row struct {
		rowKey
		b uint32
	}
	rs := make([]row, 0, len(rows))
	for r, b := range rows {
		rs = append(rs, row{r, b})
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
	for _, r := range rs {
		cs = cs[:0]
		for b := r.b; ; {
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
		slices.Sort(cs)
		hour := time.Unix(r.hour, 0).UTC()
		for _, c := range cs {
			out = append(out, storage.AttemptCount{Scope: r.scope, Subject: r.subject, Hour: hour, Key: int(c >> cellBits), N: int64(c & cellMax)})
		}
	}
	return out
}

// putBack returns counts that could not be stored to the batch.
func (p *pending) putBack(cs []storage.AttemptCount) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var last rowKey
	var b uint32
	ok := false
	for _, c := range cs {
		// take hands a row's counts out together: one lookup a row.
		if r := (rowKey{c.Subject, c.Hour.Unix(), c.Scope}); !ok || r != last {
			last = r
			b, ok = p.row(r)
		}
		switch {
		case c.N <= 0:
		case !ok:
			p.dropped.Add(1)
		default:
			p.add(b, uint16(c.Key), c.N)
		}
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
