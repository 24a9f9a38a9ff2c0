package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/troupe-gw/troupe/gateway"
	"github.com/troupe-gw/troupe/hygiene"
	"github.com/troupe-gw/troupe/stats"
	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/journal"
	"github.com/troupe-gw/troupe/storage/lastknown"
)

// health lists the dependencies /readyz reports: storage (through the last
// known state of its keys), the shared cache when it tracks its outages,
// and the usage journal.
func (a *app) health() []storage.HealthReporter {
	deps := []storage.HealthReporter{a.keys}
	if h, ok := a.cache.(storage.HealthReporter); ok {
		deps = append(deps, h)
	}
	return append(deps, a.journal)
}

// registerOutageMetrics exports the storage outage state, the usage
// journal and the attempt statistics' counts not stored
// (docs/storage.md#outages), read at scrape time.
func registerOutageMetrics(m *gateway.Metrics, keys *lastknown.Store, j *journal.Usage, st *stats.Store) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	m.Registry.MustRegister(
		gauge("troupe_storage_degraded", "1 while storage (the database) is unavailable and API keys are answered from their last known state.",
			func() float64 { return b(keys.Stats().Degraded) }),
		counter("troupe_storage_outages_total", "Storage outages this instance has seen.",
			func() float64 { return float64(keys.Stats().Outages) }),
		counter("troupe_storage_stale_key_lookups_total", "API-key lookups answered from the last known state during a storage outage.",
			func() float64 { return float64(keys.Stats().StaleAnswers) }),
		counter("troupe_storage_unverified_key_lookups_total", "API-key lookups that failed during a storage outage: no current state for the key.",
			func() float64 { return float64(keys.Stats().Unverified) }),
		gauge("troupe_usage_journal_records", "Usage records and error events in the usage journal, waiting for storage.",
			func() float64 { return float64(j.Stats().Pending) }),
		gauge("troupe_usage_journal_bytes", "Size of the usage journal file.",
			func() float64 { return float64(j.Stats().Bytes) }),
		gauge("troupe_usage_journal_full", "1 while the usage journal is full: usage records wait in memory.",
			func() float64 { return b(j.Stats().Full) }),
		counter("troupe_usage_journalled_total", "Usage records and error events written to the usage journal because storage did not take them.",
			func() float64 { return float64(j.Stats().Journalled) }),
		counter("troupe_usage_replayed_total", "Journalled usage records and error events written to storage.",
			func() float64 { return float64(j.Stats().Replayed) }),
		gauge("troupe_stats_pending_counts", "Attempt statistics' hour × key counts waiting to be stored (the 6h, 24h and 7d windows).",
			func() float64 { return float64(st.Pending()) }),
		counter("troupe_stats_dropped_counts_total", "Attempt statistics' counts dropped because storage did not take them for too long: the 6h, 24h and 7d windows miss them.",
			func() float64 { return float64(st.Dropped()) }),
	)
}

// registerHygieneMetrics exports troupe_hygiene_flagged_accounts{kind}: the
// accounts the hygiene rule flagged or disabled, by why (docs/admin-api.md#account-hygiene).
func registerHygieneMetrics(m *gateway.Metrics, k *hygiene.Keeper) {
	for _, kind := range []string{"unauthorized", "rate_limited"} {
		m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "troupe_hygiene_flagged_accounts",
			Help:        "Accounts the account hygiene rule flagged or disabled and nobody restored yet, by kind (unauthorized, rate_limited).",
			ConstLabels: prometheus.Labels{"kind": kind},
		}, func() float64 { return float64(k.Flagged(kind)) }))
	}
}
