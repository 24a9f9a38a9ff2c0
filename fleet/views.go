package fleet

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/storage"
)

// ViewsChannel is the pub/sub channel (of the shared cache) on which
// owners publish the views of the accounts they run.
const ViewsChannel = "fleet:views"

// Timing of the view exchange (Interval and Full: the defaults of ViewsConfig).
const (
	// ViewsInterval: how often an owner publishes the views that changed.
	ViewsInterval = 100 * time.Millisecond
	// ViewsFull: how often an owner publishes every view it has, so an
	// instance that joined (or missed a message) catches up.
	ViewsFull = 3 * time.Second
	// ViewsCounters: how often at most a view whose only change is in its
	// counters (requests, successes, health averages, in flight below the
	// limit) is published again. A change of what decides whether the
	// account can take a request — status, cooldown, moving, its limit,
	// configuration, or in flight reaching or leaving the limit — goes at
	// the next Interval.
	ViewsCounters = time.Second
)

// viewsChunk bounds the views in one message.
const viewsChunk = 200

// ViewPool is what the view exchange needs of this instance's actors
// (actors.System implements it).
type ViewPool interface {
	Views() []actors.View                          // the accounts run here
	RemoteViews(owner string, views []actors.View) // the others'
}

// ViewsConfig configures the view exchange.
type ViewsConfig struct {
	Fleet    *Fleet        // required
	Cache    storage.Cache // the shared cache; required
	Pool     ViewPool      // required
	Interval time.Duration // default ViewsInterval
	Full     time.Duration // default ViewsFull
	Logger   *slog.Logger
	// Peer, when set, learns each owner's address from its views, so a
	// new owner is reachable before this instance's next heartbeat reads
	// it in the live set.
	Peer *Peer
}

// viewsMsg is one message of the channel.
type viewsMsg struct {
	Owner string        `json:"o"`
	Addr  string        `json:"a,omitempty"` // the owner's announced address
	Views []actors.View `json:"v"`
}

// StartViews publishes this instance's account views and hands the
// others' to the pool, until ctx ends. The subscription is made before it
// returns.
func StartViews(ctx context.Context, cfg ViewsConfig) error {
	if cfg.Interval <= 0 {
		cfg.Interval = ViewsInterval
	}
	if cfg.Full <= 0 {
		cfg.Full = ViewsFull
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ch, err := cfg.Cache.Subscribe(ctx, ViewsChannel)
	if err != nil {
		return err
	}
	self := cfg.Fleet.Self().ID
	go func() {
		for msg := range ch {
			var m viewsMsg
			if json.Unmarshal([]byte(msg), &m) != nil || m.Owner == "" || m.Owner == self {
				continue
			}
			if cfg.Peer != nil && m.Addr != "" {
				cfg.Peer.learn(m.Owner, m.Addr)
			}
			cfg.Pool.RemoteViews(m.Owner, m.Views)
		}
	}()
	go publishViews(ctx, cfg)
	return nil
}

// published is what was last published of one account.
type published struct {
	version  uint64
	inFlight int
	at       time.Time // when
	gate     gate
	seen     bool
}

// gate is what decides whether an account can take a request, in a view.
type gate struct {
	status    actors.Status
	cooldown  time.Time
	reason    string
	moving    bool
	full      bool
	limit     int
	configGen uint64
	families  int // len(Families): a family's rest shows as a new slice
}

func gateOf(v *actors.View) gate {
	return gate{status: v.Status, cooldown: v.CooldownUntil, reason: v.CooldownReason, moving: v.Moving,
		full: v.InFlight >= v.MaxInFlight, limit: v.MaxInFlight, configGen: v.ConfigGen, families: len(v.Families)}
}

// publishViews publishes, every Interval, the views whose gate changed
// (gateOf), at most every ViewsCounters those whose counters alone changed
// (version or in-flight count: a grant changes the count without a new
// version), and every Full, or when the live set changes, all of them.
// Under load every account's counters change all the time; the limit
// keeps the channel's traffic to one view per account per second then.
func publishViews(ctx context.Context, cfg ViewsConfig) {
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	last := map[string]published{}
	self := cfg.Fleet.Self().ID
	var lastFull time.Time
	changed := cfg.Fleet.Changed()
	failing := false
	for {
		full := false
		select {
		case <-ctx.Done():
			return
		case <-changed:
			changed = cfg.Fleet.Changed()
			full = true
		case now := <-t.C:
			full = now.Sub(lastFull) >= cfg.Full
		}
		if full {
			lastFull = time.Now()
		}
		views := cfg.Pool.Views()
		var out []actors.View
		for k, p := range last {
			p.seen = false
			last[k] = p
		}
		now := time.Now()
		for i := range views {
			v := &views[i]
			p, ok := last[v.ID]
			g := gateOf(v)
			counters := p.version != v.Version || p.inFlight != v.InFlight
			if full || !ok || g != p.gate || (counters && now.Sub(p.at) >= ViewsCounters) {
				out = append(out, *v)
				last[v.ID] = published{version: v.Version, inFlight: v.InFlight, at: now, gate: g, seen: true}
				continue
			}
			p.seen = true
			last[v.ID] = p
		}
		for k, p := range last {
			if !p.seen {
				delete(last, k) // moved away or removed
			}
		}
		var err error
		for len(out) > 0 && err == nil {
			n := min(len(out), viewsChunk)
			b, _ := json.Marshal(viewsMsg{Owner: self, Addr: cfg.Fleet.Self().Addr, Views: out[:n]})
			out = out[n:]
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			err = cfg.Cache.Publish(pctx, ViewsChannel, string(b))
			cancel()
		}
		switch {
		case err != nil && !failing:
			failing = true
			cfg.Logger.Warn("fleet: views not published", "err", err)
		case err == nil && failing:
			failing = false
			cfg.Logger.Info("fleet: views published again")
		}
		if err != nil {
			clear(last) // publish everything at the next tick
		}
	}
}
