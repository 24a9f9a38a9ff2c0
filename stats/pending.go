package stats

import (
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

// maxPending bounds the pending batch, in cells (about 100 bytes each):
// while storage is unreachable the batch keeps growing until then, and
// drops what comes after.
const maxPending = 1 << 18

// cell is one pending count's row.
type cell struct {
	scope   storage.StatsScope
	key     uint16
	hour    int64 // Unix seconds of the start of the UTC hour
	subject string
}

// pending is the batch of counts recorded since the last Flush.
type pending struct {
	mu      sync.Mutex
	m       map[cell]int64 // nil after a Flush, until the next count
	last    int            // cells of the last batch taken: the next map's size (no growing it cell by cell)
	dropped atomic.Uint64
}

// add counts n more in c; p.mu is held.
func (p *pending) add(c cell, n int64) {
	if v, ok := p.m[c]; ok {
		p.m[c] = v + n
		return
	}
	if p.m == nil {
		p.m = make(map[cell]int64, p.last)
	}
	if len(p.m) >= maxPending {
		p.dropped.Add(1)
		return
	}
	p.m[c] = n
}

func hourOf(at time.Time) int64 { return at.Truncate(time.Hour).Unix() }

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
	for _, key := range k {
		p.add(cell{storage.StatsAccount, key, h, account}, 1)
		p.add(cell{storage.StatsProvider, key, h, provider}, 1)
	}
}

// tokens counts t under account and provider.
func (p *pending) tokens(at time.Time, account, provider string, t Tokens) {
	h := hourOf(at)
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, v := range [tokenKinds]int64{t.Input, t.Output, t.CacheRead, t.CacheWrite} {
		if v > 0 {
			p.add(cell{storage.StatsAccount, uint16(storedTokens + k), h, account}, v)
			p.add(cell{storage.StatsProvider, uint16(storedTokens + k), h, provider}, v)
		}
	}
}

// take empties the batch and returns its counts.
func (p *pending) take() []storage.AttemptCount {
	p.mu.Lock()
	m := p.m
	p.m, p.last = nil, len(m)
	p.mu.Unlock()
	out := make([]storage.AttemptCount, 0, len(m))
	for c, n := range m {
		out = append(out, storage.AttemptCount{Scope: c.scope, Subject: c.subject, Hour: time.Unix(c.hour, 0).UTC(), Key: int(c.key), N: n})
	}
	return out
}

// putBack returns counts that could not be stored to the batch.
func (p *pending) putBack(cs []storage.AttemptCount) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.add(cell{c.Scope, uint16(c.Key), c.Hour.Unix(), c.Subject}, c.N)
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
