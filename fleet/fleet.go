// Package fleet is the membership of a Troupe deployment: the instances
// that run now. Each instance announces itself (its ID, internal address
// and start time) in the shared cache with a TTL and renews the
// announcement on a heartbeat; every heartbeat returns the live set, and a
// change of the set is signalled to whoever waits for one (Changed).
//
// With no shared store (the embedded default: the in-memory cache, one
// process) the set is this instance alone and nothing runs in the
// background.
//
// docs/fleet.md is the design: membership here, account ownership and
// routing across instances built on it.
package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// Member is one instance of the deployment: its ID (new at every start),
// internal address and start time.
type Member = storage.FleetMember

// Defaults for the zero Config.
const (
	// DefaultTTL is how long an announcement lives without a heartbeat: an
	// instance that dies leaves the set this long after its last one.
	DefaultTTL = 5 * time.Second
	// DefaultInterval is the heartbeat period (the live set is read at
	// every heartbeat, so a new instance is seen within it).
	DefaultInterval = time.Second
)

// Config configures a Fleet.
type Config struct {
	// Store keeps the live set (rediscache.Cache in a deployment,
	// memcache.Cache in tests). nil: this instance alone, as in the
	// embedded mode; nothing is announced.
	Store storage.Membership
	// Self is this instance. An empty ID takes NewID(); a zero Started
	// takes the time of Start.
	Self Member
	// TTL is the life of an announcement; default DefaultTTL.
	TTL time.Duration
	// Interval is the heartbeat period; default DefaultInterval. It must
	// be shorter than TTL.
	Interval time.Duration
	// Logger gets the heartbeat's failures and recoveries and the set's
	// changes; default slog.Default().
	Logger *slog.Logger
}

// State is what a Fleet knows of the deployment.
type State struct {
	// Members are the live instances ordered by ID, this one included.
	// Never modified after it is returned.
	Members []Member
	// Version increases with every change of Members' set (1 at Start):
	// who is live and their announcements, not their ages (Member.Age,
	// new at every heartbeat).
	Version uint64
	// Heartbeat is the time of the last successful heartbeat; zero before
	// the first and for a Fleet with no Store.
	Heartbeat time.Time
	// Err is the last heartbeat's failure, "" after a success. While
	// heartbeats fail, Members stays the last set read.
	Err string
}

// Fleet keeps this instance announced and the live set current. Its
// methods are safe for concurrent use.
type Fleet struct {
	cfg   Config
	log   *slog.Logger
	state atomic.Pointer[State]

	mu      sync.Mutex
	changed chan struct{} // closed at the next change of Members

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// NewID returns a fresh member ID: the host name and 8 random hex digits
// ("gw-2-1f3a9c07"), unique per process run.
func NewID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "troupe"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// Start announces this instance (one heartbeat, bounded by ctx) and starts
// the heartbeat until Stop. A first heartbeat that fails is logged, not
// returned: the instance starts alone and joins once the store answers.
// Errors are an invalid Config only.
func Start(ctx context.Context, cfg Config) (*Fleet, error) {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.TTL < 0 || cfg.Interval < 0 || cfg.Interval >= cfg.TTL {
		return nil, fmt.Errorf("%w: fleet: interval (%v) must be positive and shorter than ttl (%v)", storage.ErrInvalid, cfg.Interval, cfg.TTL)
	}
	if cfg.Self.ID == "" {
		cfg.Self.ID = NewID()
	}
	if cfg.Self.Started.IsZero() {
		cfg.Self.Started = time.Now()
	}
	cfg.Self.Started = cfg.Self.Started.UTC().Truncate(time.Millisecond)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	f := &Fleet{cfg: cfg, log: cfg.Logger, changed: make(chan struct{}), done: make(chan struct{})}
	f.state.Store(&State{Members: []Member{cfg.Self}, Version: 1})
	if cfg.Store == nil {
		close(f.done)
		return f, nil
	}
	f.heartbeat(ctx)
	lctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go f.run(lctx)
	return f, nil
}

// Self returns this instance.
func (f *Fleet) Self() Member { return f.cfg.Self }

// Shared reports whether the set is kept in a shared store (false: this
// instance alone).
func (f *Fleet) Shared() bool { return f.cfg.Store != nil }

// TTL returns the life of an announcement.
func (f *Fleet) TTL() time.Duration { return f.cfg.TTL }

// State returns what the Fleet knows now.
func (f *Fleet) State() State { return *f.state.Load() }

// Members returns the live instances ordered by ID, this one included. The
// slice must not be modified.
func (f *Fleet) Members() []Member { return f.state.Load().Members }

// Changed returns a channel closed at the next change of the live set.
// Take it before reading State or Members, so a change in between is not
// missed.
func (f *Fleet) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// run heartbeats every Interval until ctx ends.
func (f *Fleet) run(ctx context.Context) {
	defer close(f.done)
	t := time.NewTicker(f.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.safeHeartbeat(ctx)
	}
}

// safeHeartbeat is one heartbeat that a panic does not take the loop down with.
func (f *Fleet) safeHeartbeat(ctx context.Context) {
	defer func() {
		if r := recover(); r != nil {
			f.log.Error("fleet: heartbeat panicked", "panic", fmt.Sprint(r))
		}
	}()
	f.heartbeat(ctx)
}

// heartbeat announces this instance once, bounded by half the TTL (a
// heartbeat slower than that could not keep the announcement alive), and
// applies the set it reads.
func (f *Fleet) heartbeat(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, f.cfg.TTL/2)
	defer cancel()
	members, err := f.cfg.Store.Heartbeat(hctx, f.cfg.Self, f.cfg.TTL)
	old := f.state.Load()
	next := *old
	if err != nil {
		if ctx.Err() != nil {
			return // stopping
		}
		if old.Err == "" {
			f.log.Warn("fleet: heartbeat failed; other instances drop this one if it lasts past the ttl",
				"member", f.cfg.Self.ID, "ttl", f.cfg.TTL, "err", err.Error())
		}
		next.Err = err.Error()
		f.state.Store(&next)
		return
	}
	if old.Err != "" {
		f.log.Info("fleet: heartbeat back", "member", f.cfg.Self.ID)
	}
	next.Err, next.Heartbeat = "", time.Now()
	changed := !sameMembers(old.Members, members)
	next.Members = members // the same set keeps its version; the members' ages are new
	if changed {
		next.Version++
		f.log.Info("fleet: members changed", "members", ids(members), "version", next.Version)
		f.state.Store(&next)
		f.mu.Lock()
		close(f.changed)
		f.changed = make(chan struct{})
		f.mu.Unlock()
		return
	}
	f.state.Store(&next)
}

// Stop ends the heartbeat and removes this instance from the live set, so
// the others see it gone at their next heartbeat rather than after the
// TTL. It waits for the loop, bounded by ctx.
func (f *Fleet) Stop(ctx context.Context) error {
	var err error
	f.once.Do(func() {
		if f.cancel == nil {
			return
		}
		f.cancel()
		select {
		case <-f.done:
		case <-ctx.Done():
			err = ctx.Err()
			return
		}
		if lerr := f.cfg.Store.Leave(ctx, f.cfg.Self.ID); lerr != nil {
			err = fmt.Errorf("fleet: leave: %w", lerr)
		}
	})
	return err
}

func sameMembers(a, b []Member) bool {
	return slices.EqualFunc(a, b, func(x, y Member) bool {
		return x.ID == y.ID && x.Addr == y.Addr && x.Started.Equal(y.Started)
	})
}

func ids(ms []Member) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.ID
	}
	return strings.Join(s, ",")
}
