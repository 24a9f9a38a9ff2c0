package storage

import (
	"context"
	"time"
)

// FleetMember is one running Troupe process of a deployment, as it
// announced itself (package fleet).
type FleetMember struct {
	// ID names the process run: unique in the deployment, new at every
	// start (a restarted instance is a new member).
	ID string
	// Addr is the internal address (host:port) other instances reach it
	// at; "" when it gave none.
	Addr string
	// Started is when the process started (millisecond precision, UTC).
	Started time.Time
	// Age is how long before the Heartbeat call that returned it the member
	// last announced itself, on the backend's clock (millisecond precision
	// for storage/rediscache; 0 for the caller itself). Heartbeat ignores
	// it in its argument.
	Age time.Duration
}

// Membership is the optional capability of a Cache to keep the live set of
// a deployment's instances (package fleet). An instance is live while its
// last announcement's ttl has not passed. Expiry is judged by the
// backend's clock — the Redis server's for storage/rediscache, one clock
// for every instance, so instances' clocks need not agree; the process's
// for storage/memcache, where the set holds the instances of one process.
// Methods are safe for concurrent use; an unreachable backend is an error
// wrapping ErrCacheUnavailable, a ttl that is not positive or an empty ID
// one wrapping ErrInvalid.
type Membership interface {
	// Heartbeat announces m as live for ttl from now, replacing its earlier
	// announcement, drops the members whose ttl has passed, and returns the
	// live members, m included, ordered by ID. One round trip.
	Heartbeat(ctx context.Context, m FleetMember, ttl time.Duration) ([]FleetMember, error)
	// Leave removes id's announcement at once (a clean shutdown); an
	// unknown id is not an error.
	Leave(ctx context.Context, id string) error
}

// OwnershipClaim is one account's ownership lease in a Renew call: what
// the caller wants, and once the call has run, what holds.
type OwnershipClaim struct {
	Account string // account ID
	// Want takes the lease when it is free, or renews it when the caller
	// holds it; false releases it when the caller holds it.
	Want bool
	// Drained, with Want false, records that the caller ended every lease
	// it granted on the account before releasing it (a planned move): the
	// next holder's take reports Clean.
	Drained bool

	Holder string // the lease's holder after the call; "" when free
	// Token is the holder's fencing token (0 when free). Tokens of an
	// account increase with every change of holder and are never reused.
	Token uint64
	// Clean reports, when this call took the lease (a new Token), that no
	// holder before it can have left leases running: the previous holder
	// released it with Drained, or it had none. False after an expiry or a
	// release without Drained, and for a lease renewed or held by another.
	Clean bool
}

// Ownership is the optional capability of a Cache to keep the ownership
// leases of a fleet's accounts (package fleet): at most one holder per
// account, a lease lasting ttl from its last renewal on the backend's
// clock. Safe for concurrent use; errors as for Membership.
type Ownership interface {
	// Renew takes, renews or releases owner's leases of claims, in order,
	// in one round trip, writing each claim's outcome into it.
	Renew(ctx context.Context, owner string, claims []OwnershipClaim, ttl time.Duration) error
}
