package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/internal/memtrim"
)

// registerTrimMetrics exports what the memory trimmer (package memtrim:
// free heap returned to the system once a burst of load is over) has done,
// read at scrape time.
func registerTrimMetrics(m *gateway.Metrics, t *memtrim.Trimmer) {
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	m.Registry.MustRegister(
		counter("troupe_memory_trims_total", "Times the free heap a burst of load left was returned to the system after the burst.",
			func() float64 { return float64(t.Stats().Trims) }),
		counter("troupe_memory_trimmed_bytes_total", "Bytes of memory those trims returned to the system.",
			func() float64 { return float64(t.Stats().Returned) }),
		counter("troupe_memory_trim_seconds_total", "Time those trims took (a garbage collection each, then the return of the free pages).",
			func() float64 { return t.Stats().Took.Seconds() }),
	)
}
