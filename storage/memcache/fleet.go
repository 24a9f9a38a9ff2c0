package memcache

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

var _ storage.Membership = (*Cache)(nil)

// members is the live set of the instances announced in this Cache: the
// one process of the embedded mode (and the several fleets of a test).
type members struct {
	mu  sync.Mutex
	set map[string]memberEntry
}

type memberEntry struct {
	m    storage.FleetMember
	seen int64 // Unix ns of its last announcement
	exp  int64 // Unix ns
}

// Heartbeat announces m as live for ttl on the cache's clock, drops the
// members whose ttl has passed, and returns the live members ordered by
// ID. See storage.Membership.
func (c *Cache) Heartbeat(_ context.Context, m storage.FleetMember, ttl time.Duration) ([]storage.FleetMember, error) {
	if c.closed.Load() {
		return nil, errClosed
	}
	if ttl <= 0 {
		return nil, invalid("ttl", ttl)
	}
	if m.ID == "" {
		return nil, fmt.Errorf("%w: memcache: member id is empty", storage.ErrInvalid)
	}
	now := c.now()
	ms := &c.members
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.set == nil {
		ms.set = make(map[string]memberEntry)
	}
	m.Started = m.Started.UTC().Truncate(time.Millisecond)
	m.Age = 0
	ms.set[m.ID] = memberEntry{m: m, seen: now, exp: deadline(now, ttl)}
	out := make([]storage.FleetMember, 0, len(ms.set))
	for id, e := range ms.set {
		if e.exp <= now {
			delete(ms.set, id)
			continue
		}
		e.m.Age = time.Duration(now - e.seen)
		out = append(out, e.m)
	}
	slices.SortFunc(out, func(a, b storage.FleetMember) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Leave removes id from the live set. See storage.Membership.
func (c *Cache) Leave(_ context.Context, id string) error {
	if c.closed.Load() {
		return errClosed
	}
	c.members.mu.Lock()
	delete(c.members.set, id)
	c.members.mu.Unlock()
	return nil
}

var _ storage.Ownership = (*Cache)(nil)

// owned are the ownership leases of this Cache's fleets (one process).
type owned struct {
	mu      sync.Mutex
	leases  map[string]ownedLease // account → its lease
	tokens  map[string]uint64     // account → its last token
	drained map[string]uint64     // account → the token last released with Drained
}

type ownedLease struct {
	holder string
	token  uint64
	exp    int64 // Unix ns
}

// Renew takes, renews or releases owner's leases of claims on the cache's
// clock. See storage.Ownership.
func (c *Cache) Renew(_ context.Context, owner string, claims []storage.OwnershipClaim, ttl time.Duration) error {
	if c.closed.Load() {
		return errClosed
	}
	if ttl <= 0 {
		return invalid("ttl", ttl)
	}
	if owner == "" {
		return fmt.Errorf("%w: memcache: lease owner is empty", storage.ErrInvalid)
	}
	now := c.now()
	o := &c.owned
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.leases == nil {
		o.leases, o.tokens, o.drained = make(map[string]ownedLease), make(map[string]uint64), make(map[string]uint64)
	}
	for i := range claims {
		cl := &claims[i]
		l, ok := o.leases[cl.Account]
		if ok && l.exp <= now {
			delete(o.leases, cl.Account)
			l, ok = ownedLease{}, false
		}
		cl.Clean = false
		switch {
		case cl.Want && !ok:
			last := o.tokens[cl.Account]
			cl.Clean = last == 0 || o.drained[cl.Account] == last
			delete(o.drained, cl.Account)
			o.tokens[cl.Account]++
			l = ownedLease{holder: owner, token: o.tokens[cl.Account], exp: deadline(now, ttl)}
			o.leases[cl.Account] = l
		case cl.Want && l.holder == owner:
			l.exp = deadline(now, ttl)
			o.leases[cl.Account] = l
		case !cl.Want && ok && l.holder == owner:
			if cl.Drained {
				o.drained[cl.Account] = l.token
			}
			delete(o.leases, cl.Account)
			l = ownedLease{}
		}
		cl.Holder, cl.Token = l.holder, l.token
	}
	return nil
}
