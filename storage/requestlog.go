package storage

import (
	"context"
	"fmt"
	"time"
)

// ErrorEvent is one failed upstream attempt of a client request (table
// error_events). Failed attempts are never billed; they are kept so that an
// operator can see which accounts failed a request, how and how fast.
type ErrorEvent struct {
	RequestID string        // UsageRecord.RequestID of the request
	Attempt   int           // 1-based attempt number within the request
	At        time.Time     // when the attempt ended (UTC)
	AccountID string        // Account.ID that failed
	Class     string        // failure class (upstream.Class names: quota, rate, auth, banned, transient, …)
	Status    int           // upstream HTTP status; 0 when there was no HTTP answer
	Latency   time.Duration // attempt start to failure
}

// RequestLogQuery selects usage records or error events: those whose At is
// at or after From and before To (a zero side is open), at most Limit of
// them (0: DefaultRequestLogLimit; more than MaxRequestLogLimit is capped),
// oldest first.
type RequestLogQuery struct {
	From, To time.Time
	Limit    int
}

// Request log limits.
const (
	// DefaultRequestLogLimit is how many rows a query with Limit 0 returns.
	DefaultRequestLogLimit = 1000
	// MaxRequestLogLimit caps RequestLogQuery.Limit.
	MaxRequestLogLimit = 100000
)

// Rows returns the number of rows q asks for: Limit, defaulted and capped.
func (q RequestLogQuery) Rows() int {
	switch {
	case q.Limit <= 0:
		return DefaultRequestLogLimit
	case q.Limit > MaxRequestLogLimit:
		return MaxRequestLogLimit
	}
	return q.Limit
}

// RequestLog stores error events and reads the request log back: the usage
// records (with their decision traces) and the error events.
type RequestLog interface {
	// InsertErrorEvents writes evs in one transaction: all or none. An event
	// whose (RequestID, Attempt) is stored (or repeated in evs) is skipped, so
	// a retried batch is not doubled. ErrInvalid if an event fails Validate
	// (nothing is written).
	InsertErrorEvents(ctx context.Context, evs []ErrorEvent) error
	// UsageRecords returns the records matching q ordered by At, then RequestID.
	UsageRecords(ctx context.Context, q RequestLogQuery) ([]UsageRecord, error)
	// ErrorEvents returns the error events matching q ordered by At, then
	// RequestID and Attempt.
	ErrorEvents(ctx context.Context, q RequestLogQuery) ([]ErrorEvent, error)
	// UsageSeries sums the usage records and error events of q's window in
	// q's buckets: every bucket of it, oldest first, those without records
	// included (NewSeries). A record counts in the bucket of its At, an
	// error event in the bucket of its At. ErrInvalid when q fails
	// Validate.
	UsageSeries(ctx context.Context, q SeriesQuery) ([]SeriesBucket, error)
}

// Validate reports whether e can be stored: RequestID must be non-empty and
// Attempt at least 1. The error wraps ErrInvalid.
func (e *ErrorEvent) Validate() error {
	if e.RequestID == "" {
		return fmt.Errorf("%w: error event without request id", ErrInvalid)
	}
	if e.Attempt < 1 {
		return fmt.Errorf("%w: error event %s: attempt %d is not positive", ErrInvalid, e.RequestID, e.Attempt)
	}
	return nil
}
