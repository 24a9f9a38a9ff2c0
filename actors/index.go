package actors

import (
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
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
	slot    int      // which verdict orders the heap: 0 the policy's, 1 the canary's
	items   []*entry // the heap; each entry keeps its position in entry.heaps
	members int      // accounts filed under this key
	live    int      // members not in a terminal status (disabled, unauthorized, banned)
	// native counts, by client protocol (translate.Protocol), the members and
	// live members whose provider speaks that protocol itself, so a request
	// limited to them (AcquireRequest.Native) knows when none exists.
	native     [numEndpoints]int
	nativeLive [numEndpoints]int
}

// numEndpoints sizes arrays indexed by translate.Protocol (1..3).
const numEndpoints = int(translate.Messages) + 1

// count adds d (+1 or -1) members of provider p to the membership counters;
// live says whether they count as live.
func (c *candidates) count(p storage.Provider, d int, live bool) {
	c.members += d
	if live {
		c.live += d
	}
	for ep := translate.Chat; int(ep) < numEndpoints; ep++ {
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
	for ep := translate.Chat; int(ep) < numEndpoints; ep++ {
		if upstream.Supports(p, ep) {
			c.nativeLive[ep] += d
		}
	}
}

func newCandidates(slot int) *candidates {
	return &candidates{slot: slot}
}

// heapPos is an entry's position in one candidate heap.
type heapPos struct {
	cs *candidates
	i  int
}

// posIn returns e's position in c's heap, and whether it is there. An entry
// is in a few heaps at most (its keys, times the running slots), so the
// scan costs less than a map lookup and touches only the entry.
func (e *entry) posIn(c *candidates) (int, bool) {
	for k := range e.heaps {
		if e.heaps[k].cs == c {
			return e.heaps[k].i, true
		}
	}
	return 0, false
}

// moved records e's new position i in c's heap, where it is.
func (e *entry) moved(c *candidates, i int) {
	for k := range e.heaps {
		if e.heaps[k].cs == c {
			e.heaps[k].i = i
			return
		}
	}
}

// leftSlot forgets e's positions in the heaps of slot sl.
func (e *entry) leftSlot(sl int) {
	kept := e.heaps[:0]
	for _, h := range e.heaps {
		if h.cs.slot != sl {
			kept = append(kept, h)
		}
	}
	clear(e.heaps[len(kept):])
	e.heaps = kept
}

// left forgets e's position in c's heap.
func (e *entry) left(c *candidates) {
	for k := range e.heaps {
		if e.heaps[k].cs == c {
			last := len(e.heaps) - 1
			e.heaps[k] = e.heaps[last]
			e.heaps[last] = heapPos{}
			e.heaps = e.heaps[:last]
			return
		}
	}
}

// better orders candidates: tier first (healthy before warm before risky),
// then score (its band, when the policy sets score_band), then accounts run
// here before those another instance owns (a remote grant costs a round trip
// to the owner: docs/fleet.md, local first), then the policy's tie-break,
// then least recently granted, then join order.
// Slot sl picks the verdict compared (0: the policy's, 1: the canary's).
func better(a, b *entry, sl int) bool {
	va, vb := &a.v[sl], &b.v[sl]
	if va.scored.Tier != vb.scored.Tier {
		return va.scored.Tier < vb.scored.Tier
	}
	if va.band != vb.band {
		return va.band > vb.band
	}
	if (a.owner == nil) != (b.owner == nil) {
		return a.owner == nil
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
	if i, ok := e.posIn(c); ok {
		if !c.up(i) {
			c.down(i)
		}
		return
	}
	c.items = append(c.items, e)
	e.heaps = append(e.heaps, heapPos{cs: c, i: len(c.items) - 1})
	c.up(len(c.items) - 1)
}

// remove deletes e if present.
func (c *candidates) remove(e *entry) {
	i, ok := e.posIn(c)
	if !ok {
		return
	}
	last := len(c.items) - 1
	if i != last {
		c.swap(i, last)
	}
	c.items[last] = nil
	c.items = c.items[:last]
	e.left(c)
	if i != last {
		if !c.up(i) {
			c.down(i)
		}
	}
}

func (c *candidates) swap(i, j int) {
	c.items[i], c.items[j] = c.items[j], c.items[i]
	c.items[i].moved(c, i)
	c.items[j].moved(c, j)
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
