package routing

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Result is one client request's outcome, counted under the policy version
// that chose its account (actors.Decision's Policy, PolicyVersion, Canary).
type Result struct {
	Policy    string
	Version   uint64
	Canary    bool
	Failed    bool          // answered 429 or 5xx
	Failovers int           // extra upstream attempts
	Latency   time.Duration // start to last byte
}

// PolicyOutcome is one policy version's results on this instance since start.
type PolicyOutcome struct {
	Policy        string  `json:"policy"`
	Version       uint64  `json:"version"`
	Canary        bool    `json:"canary"`
	Requests      int64   `json:"requests"`
	Failed        int64   `json:"failed"`          // answered 429 or 5xx
	FailedRate    float64 `json:"failed_rate"`     // failed / requests
	Failovers     int64   `json:"failovers"`       // extra upstream attempts
	MeanLatencyMs float64 `json:"mean_latency_ms"` // start to last byte
}

// outcomes are the counters of every policy version that routed requests,
// and their metrics. Count runs once a client request: a version's sums are
// atomics and its metric children are looked up once, so a request takes no
// process-wide lock and hashes no label values (docs/benchmarks.md, issue 21,
// "the closed loop (closed)").
type outcomes struct {
	registry *prometheus.Registry // nil: no metrics
	mu       sync.Mutex           // serializes adding a version to sums
	// sums are the versions' counters, copied on write: a version is added
	// once, on its first request, and a request only reads the map.
	sums     atomic.Pointer[map[outcomeKey]*outcomeSums]
	once     sync.Once
	requests *prometheus.CounterVec // troupe_policy_requests_total{policy,version,canary,result}
	failover *prometheus.CounterVec // troupe_policy_failovers_total{policy,version,canary}
}

type outcomeKey struct {
	policy  string
	version uint64
	canary  bool
}

// outcomeSums are one policy version's counters. Count adds to requests
// before failed, and Outcomes reads failed before requests, so a snapshot
// never has more failed than requests.
type outcomeSums struct {
	requests, failed, failovers atomic.Int64
	latency                     atomic.Int64 // nanoseconds
	// The version's metric children, each made on its first use, so that
	// /metrics shows a series only once it has counted something, as
	// WithLabelValues on every request did.
	ok, bad, failover lazyCounter
}

// lazyCounter is a metric child looked up on its first use and kept.
type lazyCounter struct {
	once sync.Once
	c    prometheus.Counter
}

// get returns the child of vec with k's labels and result (none if ""),
// looked up once.
func (l *lazyCounter) get(vec *prometheus.CounterVec, k outcomeKey, result string) prometheus.Counter {
	l.once.Do(func() { l.c = vec.WithLabelValues(k.labels(result)...) })
	return l.c
}

// Count adds res to its policy version's counters and metrics. Safe for
// concurrent use.
func (r *Runtime) Count(res Result) {
	o := &r.outcomes
	o.once.Do(o.register)
	k := outcomeKey{policy: res.Policy, version: res.Version, canary: res.Canary}
	s := o.sumsOf(k)
	s.requests.Add(1)
	if res.Failed {
		s.failed.Add(1)
	}
	s.failovers.Add(int64(max(res.Failovers, 0)))
	s.latency.Add(int64(res.Latency))
	if o.requests == nil {
		return
	}
	if res.Failed {
		s.bad.get(o.requests, k, "failed").Inc()
	} else {
		s.ok.get(o.requests, k, "ok").Inc()
	}
	if res.Failovers > 0 {
		s.failover.get(o.failover, k, "").Add(float64(res.Failovers))
	}
}

// sumsOf returns k's counters, added on k's first request.
func (o *outcomes) sumsOf(k outcomeKey) *outcomeSums {
	if m := o.sums.Load(); m != nil {
		if s := (*m)[k]; s != nil {
			return s
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var m map[outcomeKey]*outcomeSums
	if old := o.sums.Load(); old != nil {
		if s := (*old)[k]; s != nil {
			return s
		}
		m = maps.Clone(*old)
	} else {
		m = make(map[outcomeKey]*outcomeSums, 1)
	}
	s := &outcomeSums{}
	m[k] = s
	o.sums.Store(&m)
	return s
}

// labels are k's metric label values: policy, version, canary, then result
// unless it is "" (the failover metric has none).
func (k outcomeKey) labels(result string) []string {
	l := []string{k.policy, strconv.FormatUint(k.version, 10), strconv.FormatBool(k.canary)}
	if result != "" {
		l = append(l, result)
	}
	return l
}

// register creates the metrics on the registry (reusing ones another
// Runtime registered there).
func (o *outcomes) register() {
	if o.registry == nil {
		return
	}
	o.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "troupe_policy_requests_total",
		Help: "Client requests by the routing policy version that chose their account, whether it ran as a canary, and result (ok; failed: 429 or 5xx to the client).",
	}, []string{"policy", "version", "canary", "result"})
	o.failover = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "troupe_policy_failovers_total", Help: "Failovers (extra upstream attempts) by the routing policy version that chose the serving account.",
	}, []string{"policy", "version", "canary"})
	for _, c := range []**prometheus.CounterVec{&o.requests, &o.failover} {
		if err := o.registry.Register(*c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				*c = are.ExistingCollector.(*prometheus.CounterVec)
			}
		}
	}
}

// Outcomes returns the counters of every policy version, newest version
// first, a canary before the active policy of the same version.
func (r *Runtime) Outcomes() []PolicyOutcome {
	o := &r.outcomes
	out := []PolicyOutcome{} // [] in JSON when no version has counted yet
	var sums map[outcomeKey]*outcomeSums
	if m := o.sums.Load(); m != nil {
		sums = *m
	}
	for k, s := range sums {
		failed := s.failed.Load() // before requests: see outcomeSums
		po := PolicyOutcome{Policy: k.policy, Version: k.version, Canary: k.canary, Failed: failed,
			Requests: s.requests.Load(), Failovers: s.failovers.Load()}
		if po.Requests > 0 {
			po.FailedRate = float64(po.Failed) / float64(po.Requests)
			po.MeanLatencyMs = float64(time.Duration(s.latency.Load()).Microseconds()) / 1000 / float64(po.Requests)
		}
		out = append(out, po)
	}
	slices.SortFunc(out, func(a, b PolicyOutcome) int {
		if a.Version != b.Version {
			if a.Version > b.Version {
				return -1
			}
			return 1
		}
		if a.Canary != b.Canary {
			if a.Canary {
				return -1
			}
			return 1
		}
		return 0
	})
	return out
}
