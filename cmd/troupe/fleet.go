package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/fleet"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/rediscache"
)

// startFleet announces this instance to the deployment's others (with
// cache.driver redis; alone otherwise) and exports the live set in the
// metrics. A Redis that is down does not stop the start: the instance
// joins when it answers (docs/fleet.md).
func (a *app) startFleet(ctx context.Context) {
	cfg := fleet.Config{
		Self:     fleet.Member{ID: fleet.NewID(), Addr: fleetAddr(a.cfg.Fleet.Addr, a.addr())},
		TTL:      a.cfg.Fleet.TTL,
		Interval: a.cfg.Fleet.Heartbeat,
		Logger:   a.log,
	}
	if a.shared != nil {
		cfg.Store = a.shared
		if c, err := a.controlCache(ctx); err == nil {
			a.control, cfg.Store = c, c
		} else {
			a.log.Warn("fleet: no Redis client of its own; heartbeats share the request path's", "err", err)
		}
	}
	f, err := fleet.Start(ctx, cfg)
	if err != nil { // the configuration was checked at load
		a.log.Error("fleet: not started", "err", err)
		return
	}
	a.fleet = f
	registerFleetMetrics(a.metrics, f)
	defer func() { a.adminAPI.SetFleet(f, a.owners) }()
	if a.cfg.ownership() {
		store := storage.Ownership(a.shared)
		if a.control != nil {
			store = a.control
		}
		// Routing first: the accounts Owners takes count the leases their
		// previous owner granted before they grant (Peer.Adopt).
		ocfg := fleet.OwnerConfig{Fleet: f, Store: store, Pool: a.sys}
		if peer, err := a.startRouting(ctx, f); err != nil {
			a.log.Error("fleet: routing across instances not started: this instance serves from its own accounts only", "err", err)
		} else {
			ocfg.Adopt = peer.Adopt
		}
		o, err := fleet.StartOwners(ctx, ocfg)
		if err != nil { // the configuration was checked at load
			a.log.Error("fleet: ownership not started: this instance runs no account", "err", err)
			return
		}
		a.owners = o
		a.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "troupe_fleet_owned_accounts",
			Help: "Accounts this instance owns and runs (fleet.ownership; draining ones excluded)."},
			func() float64 { return float64(o.Owned()) }))
		a.log.Info("fleet: ownership on", "owned", o.Owned())
	}
	if f.Shared() {
		a.log.Info("fleet: joined", "member", f.Self().ID, "addr", f.Self().Addr, "members", len(f.Members()))
	}
}

// fleetAddr is the internal address to announce: fleet.addr when set,
// else the address the front listens on, with an unspecified host
// (0.0.0.0, ::, empty) replaced by the host name, which the other
// instances of a compose project or a Kubernetes headless service resolve.
func fleetAddr(configured, listening string) string {
	if configured != "" {
		return configured
	}
	host, port, err := net.SplitHostPort(listening)
	if err != nil {
		return listening
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

// registerFleetMetrics exports the live set, read at scrape time.
func registerFleetMetrics(m *gateway.Metrics, f *fleet.Fleet) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "troupe_fleet_members",
			Help: "Live instances of the deployment as this instance last read them, itself included (1 without a shared cache)."},
			func() float64 { return float64(len(f.Members())) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "troupe_fleet_heartbeat_failing",
			Help: "1 while this instance's fleet heartbeat fails (Redis unreachable): past fleet.ttl the others drop it."},
			func() float64 {
				if f.State().Err != "" {
					return 1
				}
				return 0
			}),
	)
}

// ownership reports whether accounts run only on their owner: fleet.ownership
// with a shared cache (alone, an instance owns everything: nothing to fence).
func (c *Config) ownership() bool { return c.Fleet.Ownership && c.Cache.Driver == "redis" }

// startRouting starts routing across instances (docs/fleet.md, stage 3):
// the view exchange over the shared cache's pub/sub, the internal
// endpoint (served by the front, beside /v1) and the scheduler's remote
// grants through it, with their metrics.
func (a *app) startRouting(ctx context.Context, f *fleet.Fleet) (*fleet.Peer, error) {
	master, _, err := masterKeys(a.cfg)
	if err != nil {
		return nil, err
	}
	codec, err := fleet.NewCodec(master)
	if err != nil {
		return nil, err
	}
	peer, err := fleet.StartPeer(ctx, fleet.PeerConfig{Fleet: f, Codec: codec, Pool: a.sys, Logger: a.log,
		WithholdFor: a.cfg.Gateway.RequestTimeout})
	if err != nil {
		return nil, err
	}
	a.sys.SetRemote(peer)
	if err := fleet.StartViews(ctx, fleet.ViewsConfig{Fleet: f, Cache: a.shared, Pool: a.sys, Logger: a.log, Peer: peer}); err != nil {
		return nil, err
	}
	a.server.SetMount(&fleetMount{peer: peer, inner: a.adminAPI})
	a.adminAPI.SetFleetRouting(a.sys.RemoteAccounts, peer)
	registerRoutingMetrics(a.metrics, a.sys, peer)
	return peer, nil
}

// refusalReasons are the labels of troupe_fleet_remote_refused_total, listed
// so that every series exists from the start.
var refusalReasons = []string{"busy", "unavailable", "not_owned", "unreachable", "expired", "malformed", "stale", "forged", "replayed", "internal"}

// registerRoutingMetrics exports the remote grants and views, read at scrape time.
func registerRoutingMetrics(m *gateway.Metrics, sys interface{ RemoteAccounts() int }, p *fleet.Peer) {
	m.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "troupe_fleet_remote_grants_issued_total",
			Help: "Leases this instance granted to other instances on the accounts it owns."},
			func() float64 { return float64(p.Stats().Issued) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "troupe_fleet_remote_grants_received_total",
			Help: "Leases other instances granted to this one on the accounts they own."},
			func() float64 { return float64(p.Stats().Received) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "troupe_fleet_remote_leases_adopted_total",
			Help: "Leases other instances held on accounts this instance took over, granted by their previous owner and counted here."},
			func() float64 { return float64(p.Stats().Adopted) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "troupe_fleet_remote_leases_withheld",
			Help: "Leases accounts taken over count for members that did not answer which leases they hold, until they answer or leave the live set."},
			func() float64 { return float64(p.Stats().Withheld) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "troupe_fleet_remote_leases",
			Help: "Leases granted to other instances (or adopted from a previous owner) and not released yet."},
			func() float64 { return float64(p.Stats().Held) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "troupe_fleet_remote_views",
			Help: "Accounts other instances own whose views this instance's scheduler indexes."},
			func() float64 { return float64(sys.RemoteAccounts()) }),
	)
	for _, r := range refusalReasons {
		m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "troupe_fleet_remote_refused_total",
			Help:        "Remote grants and internal messages refused, by reason (docs/fleet.md).",
			ConstLabels: prometheus.Labels{"reason": r}},
			func() float64 { return float64(p.Stats().Refused[r]) }))
	}
}

// fleetMount serves the internal endpoint beside the admin API's paths.
type fleetMount struct {
	peer  *fleet.Peer
	inner gateway.Mount
}

// Owns implements gateway.Mount.
func (m *fleetMount) Owns(path []byte) bool {
	return m.peer.Owns(string(path)) || m.inner.Owns(path)
}

// Serve implements gateway.Mount: an internal message is verified and
// answered by the peer; the rest goes to the admin API.
func (m *fleetMount) Serve(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	if !m.peer.Owns(path) {
		m.inner.Serve(ctx)
		return
	}
	if !ctx.IsPost() {
		ctx.SetStatusCode(http.StatusMethodNotAllowed)
		return
	}
	h := &ctx.Request.Header
	env := fleet.Envelope{Sender: string(h.Peek(fleet.HeaderSender)), Time: string(h.Peek(fleet.HeaderTime)),
		Nonce: string(h.Peek(fleet.HeaderNonce)), Signature: string(h.Peek(fleet.HeaderSignature))}
	status, renv, body := m.peer.Handle(ctx, path, env, ctx.PostBody())
	ctx.SetStatusCode(status)
	if renv.Signature != "" {
		ctx.Response.Header.Set(fleet.HeaderSender, renv.Sender)
		ctx.Response.Header.Set(fleet.HeaderTime, renv.Time)
		ctx.Response.Header.Set(fleet.HeaderNonce, renv.Nonce)
		ctx.Response.Header.Set(fleet.HeaderSignature, renv.Signature)
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// FullBody implements gateway.Mount (internal messages are small).
func (m *fleetMount) FullBody(h *fasthttp.RequestHeader) bool { return m.inner.FullBody(h) }

// Unread implements gateway.Mount.
func (m *fleetMount) Unread(ctx *fasthttp.RequestCtx, err error, front func(*fasthttp.RequestCtx, error)) {
	if m.peer.Owns(string(ctx.Path())) {
		front(ctx, err)
		return
	}
	m.inner.Unread(ctx, err, front)
}

// appStates keeps the accounts' handover state (actors.State) in the
// app's cache, which is opened after the actors start (and before any
// account runs): key acct-state:<id>, JSON, for as long as it can matter
// (stateTTL).
type appStates struct{ a *app }

// SaveState stores st for account id.
func (s appStates) SaveState(ctx context.Context, id string, st actors.State) error {
	if s.a.cache == nil {
		return storage.ErrCacheUnavailable
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return s.a.cache.Set(ctx, "acct-state:"+id, string(b), stateTTL(st, time.Now()))
}

// LoadState returns account id's last saved state.
func (s appStates) LoadState(ctx context.Context, id string) (actors.State, bool, error) {
	var st actors.State
	if s.a.cache == nil {
		return st, false, storage.ErrCacheUnavailable
	}
	v, ok, err := s.a.cache.Get(ctx, "acct-state:"+id)
	if err != nil || !ok {
		return st, false, err
	}
	if err := json.Unmarshal([]byte(v), &st); err != nil {
		return st, false, fmt.Errorf("account %s state: %w", id, err)
	}
	return st, true, nil
}

// stateTTL is how long a saved state is kept: until the last of its
// cooldown's end and its windows' resets, at least a day (health) and at
// most 8 days (a week-long window and a margin).
func stateTTL(st actors.State, now time.Time) time.Duration {
	end := st.CooldownUntil
	for _, w := range st.Windows {
		if w.ResetsAt.After(end) {
			end = w.ResetsAt
		}
	}
	return min(max(end.Sub(now)+time.Hour, 24*time.Hour), 8*24*time.Hour)
}

// controlCache opens the fleet's own Redis client: two connections, and a
// second to read a reply. Heartbeats and ownership renewals on the request
// path's pool waited behind its commands: at 1,000 req/s over 10,000
// accounts a loaded instance's renewal missed the pool's and the read's
// 200 ms timeouts and the instance lost every lease at once (troupe bench
// fleet). Each call stays bounded by the fleet's interval.
func (a *app) controlCache(ctx context.Context) (*rediscache.Cache, error) {
	return rediscache.New(ctx, a.cfg.Cache.URL, rediscache.Options{Prefix: a.cfg.Cache.Prefix, Lazy: true,
		PoolSize: 2, ReadTimeout: time.Second, WriteTimeout: time.Second})
}
