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
	m   storage.FleetMember
	exp int64 // Unix ns
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
	ms.set[m.ID] = memberEntry{m: m, exp: deadline(now, ttl)}
	out := make([]storage.FleetMember, 0, len(ms.set))
	for id, e := range ms.set {
		if e.exp <= now {
			delete(ms.set, id)
			continue
		}
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
