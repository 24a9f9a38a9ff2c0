package main

import (
	"context"
	"net"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/troupe-gw/troupe/fleet"
	"github.com/troupe-gw/troupe/gateway"
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
		o, err := fleet.StartOwners(ctx, fleet.OwnerConfig{Fleet: f, Store: a.shared, Pool: a.sys})
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
