package gateway

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/troupe-gw/troupe/actors"
	"github.com/troupe-gw/troupe/scripts"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// Metrics are the gateway's Prometheus metrics, registered on their own
// registry (no package-level state). Names follow the Prometheus naming
// guide: seconds for durations, _total for counters.
type Metrics struct {
	Registry   *prometheus.Registry
	requests   *prometheus.CounterVec                     // troupe_requests_total{route,status}
	latency    *prometheus.HistogramVec                   // troupe_request_duration_seconds{route}
	ttft       *prometheus.HistogramVec                   // troupe_ttft_seconds{route}
	inflight   prometheus.Gauge                           // troupe_inflight_requests
	attempts   *prometheus.CounterVec                     // troupe_upstream_attempts_total{provider,class}
	failovers  prometheus.Histogram                       // troupe_failovers_per_request
	usageRows  *prometheus.CounterVec                     // troupe_usage_records_written_total{result}
	cacheDown  prometheus.Gauge                           // troupe_cache_degraded
	cacheFlips prometheus.Counter                         // troupe_cache_outages_total
	statusMemo [4][600]atomic.Pointer[prometheus.Counter] // endpoint × status → counter, resolved once
	// attemptMemo and latencyMemo resolve attempts' and latency's children
	// once, as statusMemo does requests': a WithLabelValues (label hashing,
	// a map lookup under a lock) per attempt and per request was about
	// 1.4 µs a request at 1k req/s (docs/benchmarks.md, issue 21).
	attemptMemo [len(memoProviders)][upstream.NumClasses]atomic.Pointer[prometheus.Counter] // provider × class
	latencyMemo [4]atomic.Pointer[prometheus.Observer]                                      // endpoint

	// The Responses WebSocket (gateway/ws.go, gateway/upstream_ws.go).
	wsConns    prometheus.Gauge       // troupe_websocket_connections
	wsRefused  *prometheus.CounterVec // troupe_websocket_refused_total{reason}
	wsClosed   *prometheus.CounterVec // troupe_websocket_closed_total{reason}
	upstreamWS *prometheus.CounterVec // troupe_upstream_websocket_total{result}

	// Client connections (gateway/conns.go).
	connsOpen     prometheus.Gauge       // troupe_client_connections
	connsRefused  *prometheus.CounterVec // troupe_client_connections_refused_total{reason}
	connsTimedOut prometheus.Counter     // troupe_client_connections_header_timeout_total
	acceptErrors  prometheus.Counter     // troupe_accept_errors_total

	// Account-bound state (gateway/state.go).
	stateStripped prometheus.Counter // troupe_account_state_stripped_total
	stateRetries  prometheus.Counter // troupe_account_state_retries_total
}

var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// NewMetrics creates and registers the gateway's metrics. views, when not nil,
// is read at scrape time for troupe_accounts{state}.
func NewMetrics(views func() []actors.View) *Metrics {
	m := &Metrics{Registry: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "troupe_requests_total", Help: "Client requests by route and final status: the HTTP status, or for a stream that failed after its head was sent, the status the failure maps to (502, 503, 499).",
	}, []string{"route", "status"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "troupe_request_duration_seconds", Help: "Client request latency, first byte received to last byte sent.", Buckets: latencyBuckets,
	}, []string{"route"})
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "troupe_ttft_seconds", Help: "Time from request to the first content event of a stream.", Buckets: latencyBuckets,
	}, []string{"route"})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "troupe_inflight_requests", Help: "Client requests being served now.",
	})
	m.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "troupe_upstream_attempts_total", Help: "Upstream attempts by provider and failure class (\"ok\" for success).",
	}, []string{"provider", "class"})
	m.failovers = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "troupe_failovers_per_request", Help: "Extra upstream attempts a client request needed.", Buckets: []float64{0, 1, 2, 3, 5, 8},
	})
	m.usageRows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "troupe_usage_records_written_total", Help: "Usage records handed to storage, by result (ok, error).",
	}, []string{"result"})
	m.cacheDown = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "troupe_cache_degraded", Help: "1 while the shared cache (Redis) is unreachable and this instance serves affinity and limits locally.",
	})
	m.cacheFlips = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "troupe_cache_outages_total", Help: "Shared-cache outages this instance has seen.",
	})
	m.wsConns = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "troupe_websocket_connections", Help: "Client Responses WebSocket connections open now.",
	})
	m.wsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "troupe_websocket_refused_total", Help: "Client WebSocket upgrades refused, by reason (auth, key_limit, global_limit, shutdown).",
	}, []string{"reason"})
	m.upstreamWS = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "troupe_upstream_websocket_total", Help: "Upstream calls that were to use the upstream WebSocket, by result (websocket; fallback_1009 and fallback_busy went over HTTP on the same lease).",
	}, []string{"result"})
	m.wsClosed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "troupe_websocket_closed_total", Help: "Client WebSocket connections the gateway closed, by reason (idle_timeout: 1001 after gateway.websocket.client_idle_timeout without a frame; write_timeout: 1008, the client did not read a frame or pong within client_write_timeout; key_revoked: 1008, the connection's API key was deleted, disabled or expired since the upgrade).",
	}, []string{"reason"})
	m.Registry.MustRegister(m.wsConns, m.wsRefused, m.wsClosed, m.upstreamWS)
	m.connsOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "troupe_client_connections", Help: "Client connections open now (HTTP and WebSocket).",
	})
	m.connsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "troupe_client_connections_refused_total", Help: "Client connections refused at accept, by reason (global_limit: gateway.connections.max; ip_limit: max_per_ip).",
	}, []string{"reason"})
	m.connsTimedOut = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "troupe_client_connections_header_timeout_total", Help: "Client connections closed because no request head arrived within gateway.connections.header_timeout.",
	})
	m.acceptErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "troupe_accept_errors_total", Help: "Temporary accept errors (out of file descriptors, aborted connections), each retried after a backoff.",
	})
	m.Registry.MustRegister(m.connsOpen, m.connsRefused, m.connsTimedOut, m.acceptErrors)
	m.stateStripped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "troupe_account_state_stripped_total", Help: "Request bodies sent to an account without the account-bound state (encrypted reasoning, thinking signatures) another account made.",
	})
	m.stateRetries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "troupe_account_state_retries_total", Help: "Requests retried without account-bound state after an upstream refused it (invalid_encrypted_content).",
	})
	m.Registry.MustRegister(m.stateStripped, m.stateRetries)
	m.Registry.MustRegister(m.requests, m.latency, m.ttft, m.inflight, m.attempts, m.failovers, m.usageRows, m.cacheDown, m.cacheFlips,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.initLabels()
	if views != nil {
		m.Registry.MustRegister(&accountCollector{views: views, desc: prometheus.NewDesc(
			"troupe_accounts", "Accounts in the pool by state (active, cooling, disabled, unauthorized, banned).", []string{"state"}, nil)})
	}
	return m
}

// initLabels creates the series of every label value a rare event has, at
// 0, so they are on /metrics before the first event: a dashboard's rate()
// and an alert's absent() see a counter that has not moved yet, rather than
// none (https://prometheus.io/docs/practices/instrumentation/#avoid-missing-metrics).
func (m *Metrics) initLabels() {
	for _, r := range []string{"auth", "key_limit", "global_limit", "shutdown"} {
		m.wsRefused.WithLabelValues(r)
	}
	for _, r := range []string{"global_limit", "ip_limit"} {
		m.connsRefused.WithLabelValues(r)
	}
	for _, r := range []string{"websocket", "fallback_1009", "fallback_busy"} {
		m.upstreamWS.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.usageRows.WithLabelValues(r)
	}
}

// request counts one finished client request. The counter of each
// endpoint × status is resolved once; afterwards counting allocates nothing.
func (m *Metrics) request(ep translate.Protocol, status int) {
	if int(ep) >= len(m.statusMemo) || status < 0 || status >= len(m.statusMemo[0]) {
		m.requests.WithLabelValues(ep.Route(), strconv.Itoa(status)).Inc()
		return
	}
	memo(&m.statusMemo[ep][status], func() prometheus.Counter {
		return m.requests.WithLabelValues(ep.Route(), strconv.Itoa(status))
	}).Inc()
}

// memo returns the metric child slot holds, resolving it with resolve the
// first time (a WithLabelValues: label hashing and a map lookup under a
// lock); racing first calls keep the one stored first.
func memo[T any](slot *atomic.Pointer[T], resolve func() T) T {
	if c := slot.Load(); c != nil {
		return *c
	}
	c := resolve()
	slot.CompareAndSwap(nil, &c)
	return *slot.Load()
}

// memoProviders are the providers whose attempt counters attemptMemo holds;
// others are resolved on every count.
var memoProviders = [...]storage.Provider{storage.ProviderCodex, storage.ProviderOpenAI, storage.ProviderOpenAICompat, storage.ProviderAnthropic}

// attempt counts one upstream attempt of provider p that ended in class c.
func (m *Metrics) attempt(p storage.Provider, c upstream.Class) {
	pi := -1
	for i, mp := range memoProviders {
		if mp == p {
			pi = i
			break
		}
	}
	if pi < 0 || int(c) >= upstream.NumClasses {
		m.attempts.WithLabelValues(string(p), attemptClass(c)).Inc()
		return
	}
	memo(&m.attemptMemo[pi][c], func() prometheus.Counter {
		return m.attempts.WithLabelValues(string(p), attemptClass(c))
	}).Inc()
}

// attemptClass is c's label on troupe_upstream_attempts_total: "ok" for a
// success.
func attemptClass(c upstream.Class) string {
	if c == upstream.ClassNone {
		return "ok"
	}
	return c.String()
}

// requestLatency observes the duration d of one finished client request
// to endpoint ep.
func (m *Metrics) requestLatency(ep translate.Protocol, d time.Duration) {
	if int(ep) >= len(m.latencyMemo) {
		m.latency.WithLabelValues(ep.Route()).Observe(d.Seconds())
		return
	}
	memo(&m.latencyMemo[ep], func() prometheus.Observer {
		return m.latency.WithLabelValues(ep.Route())
	}).Observe(d.Seconds())
}

// UsageWritten counts usage records written (err nil) or lost (err non-nil).
func (m *Metrics) UsageWritten(n int, err error) {
	if err != nil {
		m.usageRows.WithLabelValues("error").Add(float64(n))
		return
	}
	m.usageRows.WithLabelValues("ok").Add(float64(n))
}

// CacheDegraded records a change of the shared cache's state (for the
// fallback cache's OnChange hook).
func (m *Metrics) CacheDegraded(degraded bool) {
	if degraded {
		m.cacheDown.Set(1)
		m.cacheFlips.Inc()
		return
	}
	m.cacheDown.Set(0)
}

type accountCollector struct {
	views func() []actors.View
	desc  *prometheus.Desc
}

func (c *accountCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *accountCollector) Collect(ch chan<- prometheus.Metric) {
	var counts [5]int
	for _, v := range c.views() {
		if int(v.Status) < len(counts) {
			counts[v.Status]++
		}
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), actors.Status(st).String())
	}
}

// WatchPolicies exports the routing-policy host's reload status, read at
// scrape time: troupe_policy_reloads_total, troupe_policy_reload_failures_total,
// troupe_policy_reload_ok (1 when the last attempt succeeded) and
// troupe_policy_version (the serving policy's version).
func (m *Metrics) WatchPolicies(status func() scripts.ReloadStatus) {
	m.Registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "troupe_policy_reloads_total", Help: "Routing policy load attempts since start."},
			func() float64 { return float64(status().Loads) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "troupe_policy_reload_failures_total", Help: "Routing policy loads refused (compile, self-test) since start; the previous policy kept serving."},
			func() float64 { return float64(status().Failures) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "troupe_policy_reload_ok", Help: "1 when the last routing policy load succeeded, else 0."},
			func() float64 {
				if status().OK {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "troupe_policy_version", Help: "Stored version of the serving routing policy (the admin API's version; 0 when not stored: a file or a built-in)."},
			func() float64 { return float64(status().Version) }),
	)
}
