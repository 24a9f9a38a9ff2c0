package memcache

import (
	"context"
	"sync"
	"sync/atomic"
)

// hub fans messages out to subscriptions. Publishers take the read lock and
// never block; adding, removing and closing subscriptions take the write
// lock, so a channel is never closed while a publisher may send on it.
type hub struct {
	mu      sync.RWMutex
	subs    map[string]map[*sub]struct{}
	n       int
	buf     int
	closed  bool
	dropped atomic.Uint64
}

type sub struct {
	channel string
	ch      chan string
	stop    func() bool // unregisters the context.AfterFunc that removes it
}

func (h *hub) init(buf int) {
	h.subs = make(map[string]map[*sub]struct{})
	h.buf = buf
}

func (h *hub) publish(channel, msg string) {
	h.mu.RLock()
	for s := range h.subs[channel] {
		select {
		case s.ch <- msg:
		default:
			h.dropped.Add(1)
		}
	}
	h.mu.RUnlock()
}

// subscribe registers a subscription that ends with ctx; ok is false when
// the hub is closed.
func (h *hub) subscribe(ctx context.Context, channel string) (<-chan string, bool) {
	s := &sub{channel: channel, ch: make(chan string, h.buf)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false
	}
	set := h.subs[channel]
	if set == nil {
		set = make(map[*sub]struct{})
		h.subs[channel] = set
	}
	set[s] = struct{}{}
	h.n++
	// The callback runs in its own goroutine and waits for h.mu, so
	// registering it under the lock is safe even if ctx has just ended.
	s.stop = context.AfterFunc(ctx, func() { h.remove(s) })
	return s.ch, true
}

// remove unregisters s and closes its channel, unless close already did.
func (h *hub) remove(s *sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[s.channel]
	if _, ok := set[s]; !ok {
		return
	}
	delete(set, s)
	if len(set) == 0 {
		delete(h.subs, s.channel)
	}
	h.n--
	close(s.ch)
}

// close ends every subscription and refuses new ones.
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for _, set := range h.subs {
		for s := range set {
			s.stop()
			close(s.ch)
		}
	}
	clear(h.subs)
	h.n = 0
}

func (h *hub) count() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.n
}
