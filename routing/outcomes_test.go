package routing

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metricValues returns the registry's counters by name and label values
// joined with ",", in the label order of the metric's description.
func metricValues(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		byLabels := map[string]float64{}
		for _, m := range mf.GetMetric() {
			key := ""
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			byLabels[key] = m.GetCounter().GetValue()
		}
		out[mf.GetName()] = byLabels
	}
	return out
}

// TestCountOutcomes counts results of two versions and a canary from
// several goroutines at once and checks the sums Outcomes reports and the
// metrics' series, a series showing only once it has counted something.
func TestCountOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := New(startSystem(t), Options{Registry: reg})
	if got := r.Outcomes(); got == nil || len(got) != 0 {
		t.Fatalf("Outcomes before any request = %#v, want an empty, non-nil slice", got)
	}
	const workers, each = 8, 250
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r.Count(Result{Policy: "smart", Version: 2, Latency: 2 * time.Millisecond})
				if i%5 == 0 {
					r.Count(Result{Policy: "smart", Version: 2, Failed: true, Failovers: 2, Latency: 4 * time.Millisecond})
				}
				if w == 0 && i%50 == 0 {
					r.Count(Result{Policy: "fresh", Version: 3, Canary: true, Latency: time.Millisecond})
				}
			}
		})
	}
	r.Count(Result{Policy: "smart", Version: 1, Failovers: 1, Latency: 10 * time.Millisecond})
	wg.Wait()

	got := r.Outcomes()
	want := []PolicyOutcome{
		{Policy: "fresh", Version: 3, Canary: true, Requests: 5, MeanLatencyMs: 1},
		{Policy: "smart", Version: 2, Requests: 2400, Failed: 400, FailedRate: 400.0 / 2400, Failovers: 800,
			MeanLatencyMs: (2000*2 + 400*4) / 2400.0},
		{Policy: "smart", Version: 1, Requests: 1, Failovers: 1, MeanLatencyMs: 10},
	}
	if len(got) != len(want) {
		t.Fatalf("Outcomes = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Policy != w.Policy || g.Version != w.Version || g.Canary != w.Canary || g.Requests != w.Requests ||
			g.Failed != w.Failed || g.Failovers != w.Failovers || !near(g.FailedRate, w.FailedRate) || !near(g.MeanLatencyMs, w.MeanLatencyMs) {
			t.Errorf("Outcomes[%d] = %+v, want %+v", i, g, w)
		}
	}

	m := metricValues(t, reg)
	wantReq := map[string]float64{
		"canary=false,policy=smart,result=ok,version=2":     2000,
		"canary=false,policy=smart,result=failed,version=2": 400,
		"canary=false,policy=smart,result=ok,version=1":     1,
		"canary=true,policy=fresh,result=ok,version=3":      5,
	}
	wantFail := map[string]float64{
		"canary=false,policy=smart,version=2": 800,
		"canary=false,policy=smart,version=1": 1,
	}
	for name, want := range map[string]map[string]float64{"troupe_policy_requests_total": wantReq, "troupe_policy_failovers_total": wantFail} {
		got := m[name]
		if len(got) != len(want) {
			t.Errorf("%s = %v, want %v", name, got, want)
			continue
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s{%s} = %v, want %v", name, k, got[k], v)
			}
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// BenchmarkCount is the gateway's count of one request's outcome under its
// policy version (routing.Runtime.Count, once a client request), with the
// metrics registered, from every P at once as at saturation.
func BenchmarkCount(b *testing.B) {
	r := New(startSystem(b), Options{Registry: prometheus.NewRegistry()})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Count(Result{Policy: "smart", Version: 1, Latency: time.Millisecond})
		}
	})
}
