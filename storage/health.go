package storage

import (
	"context"
	"time"
)

// Pinger is the optional capability of a Store or Cache to check, with one
// cheap round trip, that its backend answers (postgres.Store, sqlite.Store,
// rediscache.Cache). Outage wrappers probe with it to notice a recovery.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Health is what one dependency of an instance (storage, the shared cache,
// the usage journal) can do now, as /readyz and the metrics report it.
type Health struct {
	// Name names the dependency: "storage", "cache", "usage_journal".
	Name string
	// Degraded is true while the dependency works in a reduced mode the
	// instance can still serve through (Detail says which), e.g. API keys
	// answered from their last known state during a database outage.
	Degraded bool
	// Down is true when the instance cannot do its job through this
	// dependency (e.g. usage records can be neither written nor
	// journalled): the instance is not ready.
	Down bool
	// Since is when the current degraded or down state began; zero when
	// healthy.
	Since time.Time
	// Detail says, for an operator, what works and what does not; "" when
	// healthy. It never holds a secret.
	Detail string
}

// HealthReporter is implemented by the wrappers that track a dependency's
// state (lastknown.Store, fallback.Cache, journal.Usage). Health must be
// cheap and safe for concurrent use: /readyz calls it on every probe.
type HealthReporter interface {
	Health() Health
}
