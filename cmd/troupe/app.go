package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/admin"
	"github.com/troupe-gw/troupe/billing"
	"github.com/troupe-gw/troupe/fleet"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/hygiene"
	"github.com/troupe-gw/troupe/internal/telemetry"
	"github.com/troupe-gw/troupe/routing"
	"github.com/troupe-gw/troupe/stats"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/fallback"
	"github.com/troupe-gw/troupe/storage/journal"
	"github.com/troupe-gw/troupe/storage/lastknown"
	"github.com/troupe-gw/troupe/storage/memcache"
	"github.com/troupe-gw/troupe/storage/postgres"
	"github.com/troupe-gw/troupe/storage/rediscache"
	"github.com/troupe-gw/troupe/storage/sqlite"
	"github.com/troupe-gw/troupe/upstream"
)

// The usage recorder's batching: a batch is written when it holds
// usageBatch records or usageInterval after its first record arrived. A hard
// kill loses at most what the recorder holds in memory — usageInterval ×
// request rate + usageBatch records (docs/storage.md). 250 ms rather than
// actors' 1 s default: measured, a kill -9 lost about one interval of
// traffic, and four small write transactions a second cost nothing.
const (
	usageBatch    = 500
	usageInterval = 250 * time.Millisecond
)

// app is one running gateway: storage, the actor system and the HTTP front.
type app struct {
	cfg   *Config
	log   *slog.Logger
	store storage.Store
	cache storage.Cache
	// shared is the Redis under cache, unwrapped (nil with the in-memory
	// cache): the fleet's membership store.
	shared *rediscache.Cache
	// control is a Redis client of its own for the fleet's heartbeats and
	// ownership renewals (fleet.go, controlCache); nil without a shared cache.
	control *rediscache.Cache
	fleet   *fleet.Fleet  // the deployment's live instances (fleet.go)
	owners  *fleet.Owners // this instance's ownership leases; nil unless fleet.ownership

	sys     *actors.System
	metrics *gateway.Metrics
	server  *gateway.Server
	ln      net.Listener
	served  chan error
	// live is the server once built, for callbacks that may run before
	// (the cache's OnChange).
	live atomic.Pointer[gateway.Server]
	// unwatch ends the subscription to API-key changes.
	unwatch context.CancelFunc
	// keys is store seen through the last known state of its API keys
	// (a storage outage serves known keys); store is it once started.
	keys *lastknown.Store
	// journal takes the usage records storage does not (usage.journal).
	journal *journal.Usage
	// billing admits, prices and charges users' requests (docs/billing.md).
	billing *billing.Gate
	// feed is where the account sync is in the account change feed (sync.go).
	feed accountFeed

	codex    *codexSetup         // codex identities, TLS clients, OAuth, models catalog (codex.go)
	admin    adminSetup          // the admin UI's first-start result (admin.go)
	adminAPI *admin.Server       // the admin API and console, mounted on server
	policies *routing.Runtime    // the routing policy and canary: host, file watcher, scheduler and router
	traces   *telemetry.Provider // OpenTelemetry span export; nil when tracing is off
	hygiene  *hygiene.Keeper     // the account hygiene rule, swept by background
}

func newLogger(cfg *Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Log.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.Log.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// openStore opens the configured backend, creating the data directory and
// the master key file when needed.
func openStore(ctx context.Context, cfg *Config) (storage.Store, error) {
	sealer, err := newSealer(cfg)
	if err != nil {
		return nil, err
	}
	return openStoreWith(ctx, cfg, sealer)
}

// masterKeys returns the configured master key (storage.master_key, or the
// key file {data_dir}/master.key, created when missing) and the previous
// keys kept for a rotation (storage.previous_master_keys), newest first.
// Errors name the configuration key, never a key's value.
func masterKeys(cfg *Config) (current []byte, previous [][]byte, err error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("data dir: %w", err)
	}
	if cfg.Storage.MasterKey != "" {
		current, err = storage.ParseKey(cfg.Storage.MasterKey)
	} else {
		current, err = storage.LoadOrCreateKey(filepath.Join(cfg.DataDir, "master.key"))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("master key: %w", err)
	}
	for i, s := range cfg.Storage.PreviousMasterKeys {
		k, err := storage.ParseKey(s)
		if err != nil {
			return nil, nil, fmt.Errorf("storage.previous_master_keys[%d]: %w", i, err)
		}
		previous = append(previous, k)
	}
	return current, previous, nil
}

// newSealer returns the Sealer of the configured keys: it seals with the
// master key and opens values sealed with it or any previous key.
func newSealer(cfg *Config) (*storage.Sealer, error) {
	current, previous, err := masterKeys(cfg)
	if err != nil {
		return nil, err
	}
	sealer, err := storage.NewSealer(current, previous...)
	if err != nil {
		return nil, fmt.Errorf("master keys: %w", err)
	}
	return sealer, nil
}

// openStoreWith opens the configured backend with sealer.
func openStoreWith(ctx context.Context, cfg *Config, sealer *storage.Sealer) (storage.Store, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	if cfg.Storage.Driver == "postgres" {
		return postgres.Open(ctx, cfg.Storage.DSN, sealer)
	}
	dsn := cfg.Storage.DSN
	if dsn == "" {
		dsn = filepath.Join(cfg.DataDir, "troupe.db")
	}
	return sqlite.Open(ctx, dsn, sealer)
}

// openCache opens the configured cache. Redis is wrapped so that an outage
// degrades to this process's memory (affinity and limits go local) and
// recovers by itself; onChange reports the state for metrics. shared is
// the Redis itself, unwrapped, for the fleet's membership (which must see
// an outage, not a local stand-in); nil with the in-memory cache.
func openCache(ctx context.Context, cfg *Config, log *slog.Logger, onChange func(degraded bool)) (c storage.Cache, shared *rediscache.Cache, err error) {
	local := memcache.New(memcache.Options{})
	if cfg.Cache.Driver != "redis" {
		return local, nil, nil
	}
	rediscache.UseLogger(log)
	rc, err := rediscache.New(ctx, cfg.Cache.URL, rediscache.Options{Prefix: cfg.Cache.Prefix, Lazy: true})
	if err != nil {
		local.Close()
		return nil, nil, fmt.Errorf("cache: %w", err)
	}
	return fallback.New(rc, local, fallback.Options{Logger: log, OnChange: onChange}), rc, nil
}

// startApp opens storage, syncs declared accounts, starts the actors and
// listens. It does not serve yet; call serve.
// The port is bound first, so that a busy one fails the start at once,
// before storage, the pool and the actors are built.
func startApp(ctx context.Context, cfg *Config, log *slog.Logger) (*app, error) {
	ln, err := listenFront(cfg.Listen)
	if err != nil {
		return nil, err
	}
	store, err := openStore(ctx, cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	a := &app{cfg: cfg, log: log, store: store, ln: ln}
	if err := a.start(ctx); err != nil {
		ln.Close()
		store.Close()
		return nil, err
	}
	return a, nil
}

// listenFront binds addr (host:port) for the front. A port in use is
// reported with what to do about it; the error wraps the listen error
// (syscall.EADDRINUSE for a busy port).
func listenFront(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("listen on %s: %w: another program (another troupe?) has this port; stop it, or pick another address with --listen ADDR (listen: in the config, TROUPE_LISTEN)", addr, syscall.EADDRINUSE)
	}
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

// start wraps a.store for outages (lastknown; the usage journal) and
// starts the rest. On error a.store is the caller's store again, open.
func (a *app) start(ctx context.Context) (err error) {
	cfg := a.cfg
	backend := a.store
	a.keys, err = lastknown.New(ctx, backend, lastknown.Options{Logger: a.log})
	if err != nil {
		return err
	}
	a.billing = billing.New(backend, nil, billing.Options{Logger: a.log})
	if err = a.billing.Reload(ctx); err != nil {
		a.keys.Stop()
		return err
	}
	// Below the journal, so a user's hold is released only when its charge
	// is stored, after an outage too.
	a.journal, err = journal.Open(filepath.Join(cfg.DataDir, "usage.journal"), billing.CommitWriter(backend, a.billing),
		journal.Options{MaxBytes: cfg.Storage.UsageJournalMaxBytes, Logger: a.log})
	if errors.Is(err, syscall.EWOULDBLOCK) { // its lock: one process a data directory
		a.keys.Stop()
		return busyDirError(cfg.DataDir, "another troupe", stopHint(cfg.DataDir))
	}
	if err != nil {
		a.keys.Stop()
		return fmt.Errorf("usage journal: %w", err)
	}
	a.store = announced{Store: a.keys, a: a}
	a.feed = accountFeed{wake: make(chan struct{}, 1)}
	defer func() {
		if err != nil {
			if a.traces != nil {
				_ = a.traces.Shutdown(context.Background())
				a.traces = nil
			}
			a.journal.Close()
			a.keys.Stop()
			a.store = backend
		}
	}()
	if err = a.startWrapped(ctx); err != nil {
		return err
	}
	// The long windows of the attempt statistics are kept in the backend
	// itself: lastknown wraps only what it serves in an outage.
	if as, ok := backend.(storage.AttemptStats); ok {
		a.server.Stats().UseStorage(as)
	}
	return nil
}

func (a *app) startWrapped(ctx context.Context) error {
	cfg := a.cfg
	accounts, err := a.seedAccounts(ctx)
	if err != nil {
		return err
	}
	cx, err := newCodexSetup(cfg)
	if err != nil {
		return err
	}
	a.codex = cx
	if err := a.startActors(cx); err != nil {
		return err
	}
	if err := a.openCacheOnce(ctx); err != nil {
		a.sys.Stop(context.Background())
		return err
	}
	for _, acc := range accounts {
		a.sys.PutAccount(acc)
	}
	a.server = gateway.New(gatewayConfig(cfg), a.sys, a.store, a.cache, a.metrics, a.log)
	a.billing.SetCache(a.cache)
	a.server.SetBilling(a.billing)
	if err := a.startTracing(ctx); err != nil {
		a.sys.Stop(context.Background())
		a.cache.Close()
		return err
	}
	a.server.SetModelCatalog(cx.catalog)
	a.server.SetHealth(a.health()...)
	registerOutageMetrics(a.metrics, a.keys, a.journal, a.server.Stats())
	a.live.Store(a.server)
	if err := a.watchKeys(); err != nil {
		a.sys.Stop(context.Background())
		a.cache.Close()
		return err
	}
	if err := a.startPolicies(); err != nil {
		a.sys.Stop(context.Background())
		a.cache.Close()
		return err
	}
	if a.hygiene, err = hygiene.New(ctx, cfg.hygieneRule(), a.store, a.sys, a.log, nil); err != nil {
		a.unwatch()
		a.sys.Stop(context.Background())
		a.cache.Close()
		return err
	}
	registerHygieneMetrics(a.metrics, a.hygiene)
	// The admin API and console, served by the front beside /v1.
	a.adminAPI = admin.New(admin.Deps{Hygiene: a.hygiene, Front: a.server, Pool: a.sys, Store: a.store, Cache: a.cache, Routing: a.policies, Stats: a.server.Stats(), Billing: a.billing,
		Instance: telemetry.InstanceID(ctx), Log: a.log})
	a.server.SetMount(a.adminAPI)
	// Listen before the first admin user is created: its generated password
	// is printed only once the server runs, and a start that fails on a busy
	// port must not create a user whose password nobody saw. startApp and
	// the demo have bound it already, before anything was built.
	if a.ln == nil {
		if a.ln, err = listenFront(cfg.Listen); err != nil {
			a.unwatch()
			a.sys.Stop(context.Background())
			a.cache.Close()
			return err
		}
	}
	if err := a.setupAdmin(ctx); err != nil {
		a.ln.Close()
		a.unwatch()
		a.sys.Stop(context.Background())
		a.cache.Close()
		return err
	}
	a.startFleet(ctx) // last: nothing after it can fail, so it needs no undoing
	a.log.Info("troupe listening", "addr", a.ln.Addr().String(), "accounts", len(accounts), "storage", cfg.Storage.Driver, "cache", cfg.Cache.Driver)
	return nil
}

// seedAccounts stores the accounts of the configuration file (an unset
// max_concurrency takes the CLI's default) and returns every stored
// account.
func (a *app) seedAccounts(ctx context.Context) ([]storage.Account, error) {
	for _, ac := range a.cfg.Accounts {
		acc := ac.account()
		if acc.MaxConcurrency == 0 { // unset in the file: the CLI's default
			acc.MaxConcurrency = defaultMaxConcurrency
		}
		if _, err := a.store.PutAccount(ctx, acc); err != nil {
			return nil, fmt.Errorf("account %s: %w", ac.Name, err)
		}
	}
	return a.loadAccounts(ctx)
}

// startActors starts the actor system (its transports from cx, usage
// written through the journal) and the metrics over its views.
func (a *app) startActors(cx *codexSetup) error {
	cfg := a.cfg
	mode, _ := upstream.ParseClientMode(cfg.Gateway.UpstreamClient) // checked by validate
	topts := upstream.Options{HeaderTimeout: cfg.Gateway.HeaderTimeout, ClientMode: mode}
	var metrics *gateway.Metrics
	sys, err := actors.Start(actors.Config{
		Store: a.journal,
		Transport: func(acc storage.Account) (upstream.Transport, error) {
			return upstream.New(acc, cx.options(cfg, topts, acc))
		},
		Refresh:        cx.refreshConfig(a),
		Logger:         a.log,
		UsageBatch:     usageBatch,
		UsageInterval:  usageInterval,
		OnUsageWritten: func(n int, err error) { metrics.UsageWritten(n, err) },
		WSIdleTimeout:  cfg.Gateway.WebSocket.IdleTimeout,
		QuotaProbe:     quotaProbe(cfg.Gateway.QuotaProbe),
		Fenced:         cfg.ownership(),
		Open:           a.store.OpenCredentials,
		States:         appStates{a}, // used with Fenced only
	})
	if err != nil {
		return err
	}
	a.sys = sys
	metrics = gateway.NewMetrics(sys.Views)
	a.metrics = metrics
	return nil
}

// openCacheOnce opens the configured cache unless the app has one (a
// restart keeps it). Its outages show in the metrics; when it recovers,
// the API keys are read again, since key-change broadcasts sent during the
// outage were missed.
func (a *app) openCacheOnce(ctx context.Context) error {
	if a.cache != nil {
		return nil
	}
	metrics := a.metrics
	var err error
	a.cache, a.shared, err = openCache(ctx, a.cfg, a.log, func(degraded bool) {
		metrics.CacheDegraded(degraded)
		if s := a.live.Load(); s != nil && !degraded {
			// Trusting what is known meanwhile: the database may be down too.
			a.keys.Refresh()
			s.InvalidateKeys()
		}
	})
	return err
}

// gatewayConfig is the front's configuration from cfg.
func gatewayConfig(cfg *Config) gateway.Config {
	return gateway.Config{
		MaxBodySize:       cfg.Gateway.MaxBodyBytes,
		MaxAttempts:       cfg.Gateway.MaxAttempts,
		MaxWait:           cfg.Gateway.MaxWait,
		RequestTimeout:    cfg.Gateway.RequestTimeout,
		Aliases:           cfg.Aliases,
		FirstTokenTimeout: cfg.Gateway.FirstTokenTimeout,
		NonStreamTimeout:  cfg.Gateway.NonStreamTimeout,
		HeartbeatInterval: cfg.Gateway.HeartbeatInterval,
		FailoverBudget:    cfg.Gateway.FailoverBudget,
		HoldBufferCap:     cfg.Gateway.HoldBufferBytes,
		// Client connections.
		MaxConns:      cfg.Gateway.Connections.Max,
		MaxConnsPerIP: cfg.Gateway.Connections.MaxPerIP,
		HeaderTimeout: cfg.Gateway.Connections.HeaderTimeout,
		ReadTimeout:   cfg.Gateway.Connections.ReadTimeout,
		IdleTimeout:   cfg.Gateway.Connections.IdleTimeout,
		// Affinity and the Responses WebSocket.
		SessionAffinityTTL: cfg.Gateway.SessionAffinityTTL,
		WebSocket: gateway.WSConfig{
			Upstream:             cfg.Gateway.WebSocket.Upstream,
			MaxConnections:       cfg.Gateway.WebSocket.MaxConnections,
			MaxConnectionsPerKey: cfg.Gateway.WebSocket.MaxConnectionsPerKey,
			MaxMessage:           cfg.Gateway.WebSocket.MaxMessageBytes,
			IdleTimeout:          cfg.Gateway.WebSocket.ClientIdleTimeout,
			WriteTimeout:         cfg.Gateway.WebSocket.ClientWriteTimeout,
			MaxTranscriptBytes:   cfg.Gateway.WebSocket.MaxTranscriptBytes,
		},
	}
}

// startTracing starts the OpenTelemetry pipeline when the configuration or
// the OTEL_* environment asks for it, and hands its tracer to the gateway
// (docs/observability.md).
func (a *app) startTracing(ctx context.Context) error {
	tc := a.cfg.Tracing
	p, err := telemetry.Setup(ctx, telemetry.Config{Enabled: tc.Enabled, Endpoint: tc.Endpoint, Protocol: tc.Protocol,
		SampleRatio: tc.SampleRatio, ServiceVersion: version, Logger: a.log}, nil)
	if err != nil || p == nil {
		return err
	}
	a.traces = p
	t := gateway.Tracing{Tracer: p.Tracer(), Instance: p.Instance()}
	if tc.RecordContent {
		t.ContentBytes = tc.ContentMaxBytes
	}
	a.server.SetTracing(t)
	a.log.Info("tracing on", "endpoint", p.Endpoint(), "protocol", p.Protocol(), "instance", p.Instance(), "record_content", tc.RecordContent)
	return nil
}

// watchKeys subscribes to the cache's "keys" channel, on which API-key
// changes are announced (troupe keys create/update/revoke with a shared
// cache), and drops the gateway's cached key lookups on every message, so a
// disabled or changed key takes effect at once instead of after the key
// cache's 30 s. The subscription is made before it returns and lasts until
// shutdown.
// (The cache bounds the subscribe call itself: a Redis that is down is
// retried in the background by the fallback cache.)
func (a *app) watchKeys() error {
	wctx, cancel := context.WithCancel(context.Background())
	ch, err := a.cache.Subscribe(wctx, admin.KeysChannel)
	if err != nil {
		cancel()
		return fmt.Errorf("cache: subscribe to %q: %w", admin.KeysChannel, err)
	}
	a.unwatch = cancel
	srv := a.server
	go func() {
		for msg := range ch {
			a.keys.KeysChanged()
			srv.InvalidateKeys()
			a.log.Debug("api keys changed: key cache dropped", "change", msg)
		}
	}()
	bills, err := a.cache.Subscribe(wctx, billing.Channel)
	if err != nil {
		cancel()
		return fmt.Errorf("cache: subscribe to %q: %w", billing.Channel, err)
	}
	go a.watchBilling(wctx, bills)
	// A Redis restarted empty gets this instance's holds and slots in
	// flight back within a second, even while its requests all stream.
	go a.billing.Watch(wctx, billing.DefaultWatchInterval)
	accs, err := a.cache.Subscribe(wctx, admin.AccountsChannel)
	if err != nil {
		cancel()
		return fmt.Errorf("cache: subscribe to %q: %w", admin.AccountsChannel, err)
	}
	go a.watchAccounts(accs)
	return nil
}

// billingReload is how often prices are read again without an
// announcement: a change made by the CLI without a shared cache.
const billingReload = 30 * time.Second

// watchBilling reloads the billing gate's prices and drops its cached
// users on every message of the billing channel (prices or users changed
// by the admin API, or the CLI with a shared cache), and every
// billingReload, until ctx ends.
func (a *app) watchBilling(ctx context.Context, ch <-chan string) {
	t := time.NewTicker(billingReload)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := a.billing.Reload(rctx); err != nil && ctx.Err() == nil {
			a.log.Warn("billing: prices not reloaded; the previous ones stay", "err", err)
		}
		cancel()
	}
}

// addr is the address the gateway listens on (host:port).
func (a *app) addr() string { return a.ln.Addr().String() }

// serve runs the front in the background.
func (a *app) serve() {
	a.served = make(chan error, 1)
	go func() { a.served <- a.server.Serve(a.ln) }()
}

// shutdown stops the front (waiting for open requests up to grace), then the
// actors (flushing usage), then storage.
func (a *app) shutdown(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var errs []error
	if a.server != nil {
		if err := a.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	}
	if a.ln != nil {
		// Shutdown cannot close a listener Serve has not registered yet.
		if err := a.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, fmt.Errorf("listener: %w", err))
		}
	}
	if a.unwatch != nil {
		a.unwatch()
	}
	if a.owners != nil { // the front grants nothing more: hand the accounts over now
		a.sys.FlushStates() // their states first, for the next owners
		octx, ocancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.owners.Stop(octx); err != nil {
			a.log.Warn("fleet: ownership leases not released; the next owners take the accounts after fleet.ttl", "err", err)
		}
		ocancel()
	}
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if err := a.sys.Stop(sctx); err != nil {
		errs = append(errs, fmt.Errorf("actors: %w", err))
	}
	if a.server != nil { // after the front: the last attempts' counts are stored too
		fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.server.Stats().Flush(fctx); err != nil && !errors.Is(err, stats.ErrNoStorage) {
			a.log.Warn("stats: the last attempts' counts were not stored", "err", err)
		}
		fcancel()
	}
	if a.traces != nil { // after the front: the last requests' spans go out too
		tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.traces.Shutdown(tctx); err != nil {
			a.log.Warn("tracing: spans not exported at shutdown", "err", err)
		}
		tcancel()
	}
	if a.fleet != nil { // before the cache: leaving is a Redis call
		fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.fleet.Stop(fctx); err != nil {
			a.log.Warn("fleet: not removed from the live set; the others drop this instance after fleet.ttl", "err", err)
		}
		fcancel()
	}
	if a.control != nil {
		a.control.Close()
	}
	if a.cache != nil {
		if err := a.cache.Close(); err != nil {
			errs = append(errs, fmt.Errorf("cache: %w", err))
		}
	}
	if a.journal != nil { // after the actors: the recorder's last batches went through it
		if err := a.journal.Close(); err != nil {
			errs = append(errs, fmt.Errorf("usage journal: %w", err))
		}
	}
	if err := a.store.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// baseURL is the /v1 URL clients use.
func (a *app) baseURL() string {
	host := a.addr()
	if strings.HasPrefix(host, "[::]") || strings.HasPrefix(host, "0.0.0.0") {
		_, port, _ := net.SplitHostPort(host)
		host = "127.0.0.1:" + port
	}
	return "http://" + host + "/v1"
}
