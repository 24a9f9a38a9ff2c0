package gateway

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/translate"
	"github.com/troupe-gw/troupe/upstream"
)

// The memoized attempt counters and latency histograms count into the same
// series WithLabelValues names, for known providers and others alike.
func TestMetricsMemo(t *testing.T) {
	m := NewMetrics(nil)
	for range 2 {
		m.attempt(storage.ProviderOpenAI, upstream.ClassNone)
		m.attempt(storage.ProviderAnthropic, upstream.ClassRate)
		m.attempt("other", upstream.ClassTransient)
		m.requestLatency(translate.Chat, time.Millisecond)
	}
	for _, tc := range []struct{ provider, class string }{{"openai", "ok"}, {"anthropic", "rate"}, {"other", "transient"}} {
		if n := testutil.ToFloat64(m.attempts.WithLabelValues(tc.provider, tc.class)); n != 2 {
			t.Errorf("attempts{%s,%s} = %v, want 2", tc.provider, tc.class, n)
		}
	}
	if n := testutil.CollectAndCount(m.attempts); n != 3 {
		t.Errorf("%d attempt series, want 3", n)
	}
	if n := testutil.CollectAndCount(m.latency); n != 1 {
		t.Errorf("%d latency series, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { m.attempt(storage.ProviderOpenAI, upstream.ClassNone) }); n != 0 {
		t.Errorf("attempt: %v allocations, want 0", n)
	}
}
