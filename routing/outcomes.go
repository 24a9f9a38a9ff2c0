package routing

import (
	"errors"
	"slices"
	"strconv"
	"sync"
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
// and their metrics.
type outcomes struct {
	registry *prometheus.Registry // nil: no metrics
	mu       sync.Mutex
	sums     map[outcomeKey]*outcomeSums
	once     sync.Once
	requests *prometheus.CounterVec // troupe_policy_requests_total{policy,version,canary,result}
	failover *prometheus.CounterVec // troupe_policy_failovers_total{policy,version,canary}
}

type outcomeKey struct {
	policy  string
	version uint64
	canary  bool
}

type outcomeSums struct {
	requests, failed, failovers int64
	latency                     time.Duration
}

// Count adds res to its policy version's counters and metrics. Safe for
// concurrent use.
func (r *Runtime) Count(res Result) {
	o := &r.outcomes
	o.once.Do(o.register)
	k := outcomeKey{policy: res.Policy, version: res.Version, canary: res.Canary}
	o.mu.Lock()
	if o.sums == nil {
		o.sums = make(map[outcomeKey]*outcomeSums)
	}
	s := o.sums[k]
	if s == nil {
		s = &outcomeSums{}
		o.sums[k] = s
	}
	s.requests++
	if res.Failed {
		s.failed++
	}
	s.failovers += int64(max(res.Failovers, 0))
	s.latency += res.Latency
	o.mu.Unlock()
	if o.requests != nil {
		v, cn, result := strconv.FormatUint(k.version, 10), strconv.FormatBool(k.canary), "ok"
		if res.Failed {
			result = "failed"
		}
		o.requests.WithLabelValues(k.policy, v, cn, result).Inc()
		if res.Failovers > 0 {
			o.failover.WithLabelValues(k.policy, v, cn).Add(float64(res.Failovers))
		}
	}
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
	o.mu.Lock()
	out := make([]PolicyOutcome, 0, len(o.sums))
	for k, s := range o.sums {
		po := PolicyOutcome{Policy: k.policy, Version: k.version, Canary: k.canary, Requests: s.requests, Failed: s.failed, Failovers: s.failovers}
		if s.requests > 0 {
			po.FailedRate = float64(s.failed) / float64(s.requests)
			po.MeanLatencyMs = float64(s.latency.Microseconds()) / 1000 / float64(s.requests)
		}
		out = append(out, po)
	}
	o.mu.Unlock()
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
