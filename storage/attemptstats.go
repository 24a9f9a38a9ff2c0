package storage

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// StatsScope says what an AttemptCount counts the attempts of.
type StatsScope uint8

// The scopes of attempt statistics.
const (
	StatsAccount  StatsScope = 1 // Subject is an Account.ID
	StatsProvider StatsScope = 2 // Subject is a Provider
)

// AttemptCount is one cell of the hourly rollup of upstream attempts (table
// attempt_stats): how many attempts of one account or provider in one UTC
// hour had one key — a failure class, an HTTP status, a latency or TTFT bin
// — or, for a token key, the sum of their tokens. Package stats writes and
// reads it and owns the meaning of Key (stats/pending.go "Stored keys"); storage
// only adds and sums.
type AttemptCount struct {
	Scope   StatsScope
	Subject string    // account ID or provider name
	Hour    time.Time // start of the UTC hour
	Key     int       // 0..MaxStatsKey
	N       int64     // added to the stored count
}

// MaxStatsKey is the largest AttemptCount.Key stored.
const MaxStatsKey = 1023

// AttemptStats stores the hourly rollup of upstream attempts that package
// stats answers its long windows (6h, 24h, 7d) from, shared by every
// instance of a deployment. It is an optional capability of a Store: both
// backends have it.
type AttemptStats interface {
	// AddAttemptCounts adds each count's N to its row (Scope, Subject,
	// Hour, Key), creating the row when missing: all or none. A backend
	// may write a batch in several transactions, so that other writes do
	// not wait for all of it (SQLite's one writer), and then takes back
	// what it wrote when a later transaction fails; readers may see part of
	// a batch while it is written. Counts of one row may repeat in cs (they add up). Subject
	// text PostgreSQL cannot hold is stored with U+FFFD in place of the bad
	// bytes. ErrInvalid (nothing written) when a count's Scope is not one
	// of the StatsScope constants or its Key is outside 0..MaxStatsKey.
	AddAttemptCounts(ctx context.Context, cs []AttemptCount) error
	// AttemptCounts returns the rows of scope whose Hour is at or after
	// from and before to, ordered by subject (bytewise), hour, key; subject
	// "" selects every subject of scope, others only that one. Rows are
	// never zero.
	AttemptCounts(ctx context.Context, scope StatsScope, subject string, from, to time.Time) ([]AttemptCount, error)
	// AttemptTotals is AttemptCounts summed over the hours: one count per
	// subject and key, ordered by subject (bytewise) and key, each with
	// Hour from. It is what a window's summary reads: one row a key
	// rather than one a key and hour.
	AttemptTotals(ctx context.Context, scope StatsScope, subject string, from, to time.Time) ([]AttemptCount, error)
	// AttemptSubjects returns the subjects of scope with a row whose Hour
	// is at or after from and before to, ordered bytewise.
	AttemptSubjects(ctx context.Context, scope StatsScope, from, to time.Time) ([]string, error)
	// PruneAttemptCounts deletes the rows whose Hour is before before and
	// returns how many it deleted.
	PruneAttemptCounts(ctx context.Context, before time.Time) (int64, error)
}

// Validate reports whether c can be stored; the error wraps ErrInvalid.
func (c *AttemptCount) Validate() error {
	if c.Scope != StatsAccount && c.Scope != StatsProvider {
		return fmt.Errorf("%w: attempt count of unknown scope %d", ErrInvalid, c.Scope)
	}
	if c.Key < 0 || c.Key > MaxStatsKey {
		return fmt.Errorf("%w: attempt count key %d outside 0..%d", ErrInvalid, c.Key, MaxStatsKey)
	}
	return nil
}

// CoalesceAttemptCounts validates cs and returns its counts summed by row
// (Scope, Subject with CleanText applied, Hour truncated to the UTC hour,
// Key), ordered by scope, subject, hour and key: the order backends write
// rows in, so that concurrent writers lock shared rows in the same order.
func CoalesceAttemptCounts(cs []AttemptCount) ([]AttemptCount, error) {
	// Sorted first, a row's counts are adjacent and sum in place: no map of
	// the rows (a flush at 1,000 req/s over 10,000 accounts holds about
	// 25,000, and the map was a third of what the flush allocated).
	out := make([]AttemptCount, len(cs))
	for i := range cs {
		c := cs[i]
		if err := c.Validate(); err != nil {
			return nil, fmt.Errorf("attempt count %d: %w", i, err)
		}
		c.Subject = CleanText(c.Subject)
		c.Hour = c.Hour.UTC().Truncate(time.Hour)
		out[i] = c
	}
	sortAttemptCounts(out)
	n := 0
	for i := range out {
		if n > 0 && sameAttemptRow(&out[n-1], &out[i]) {
			out[n-1].N += out[i].N
			continue
		}
		out[n] = out[i]
		n++
	}
	return out[:n], nil
}

// sameAttemptRow reports whether a and b count in the same row.
func sameAttemptRow(a, b *AttemptCount) bool {
	return a.Scope == b.Scope && a.Key == b.Key && a.Hour.Equal(b.Hour) && a.Subject == b.Subject
}

// sortAttemptCounts orders cs by scope, subject (bytewise), hour and key.
func sortAttemptCounts(cs []AttemptCount) {
	slices.SortFunc(cs, func(a, b AttemptCount) int {
		if a.Scope != b.Scope {
			return cmp.Compare(a.Scope, b.Scope)
		}
		if c := strings.Compare(a.Subject, b.Subject); c != 0 {
			return c
		}
		if c := a.Hour.Compare(b.Hour); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
}
