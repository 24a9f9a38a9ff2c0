package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/troupe-gw/troupe/storage"
)

var _ storage.AttemptStats = (*Store)(nil)

// addAttemptCountsSQL adds a batch of counts, given as column arrays
// already summed by row and in key order (so that concurrent batches of
// several instances lock shared rows in the same order), to attempt_stats.
const addAttemptCountsSQL = `INSERT INTO attempt_stats AS a (scope, subject, hour, key, n)
SELECT * FROM unnest($1::smallint[], $2::text[], $3::timestamptz[], $4::smallint[], $5::bigint[])
ORDER BY 1, 2, 3, 4
ON CONFLICT (scope, subject, hour, key) DO UPDATE SET n = a.n + excluded.n`

// AddAttemptCounts adds cs to their attempt_stats rows in one statement
// (storage.AttemptStats).
func (s *Store) AddAttemptCounts(ctx context.Context, cs []storage.AttemptCount) error {
	cs, err := storage.CoalesceAttemptCounts(cs)
	if err != nil {
		return fmt.Errorf("postgres: add attempt counts: %w", err)
	}
	if len(cs) == 0 {
		return nil
	}
	var (
		scope, key = make([]int16, len(cs)), make([]int16, len(cs))
		subject    = make([]string, len(cs))
		hour       = make([]time.Time, len(cs))
		n          = make([]int64, len(cs))
	)
	for i := range cs {
		scope[i], subject[i], hour[i], key[i], n[i] = int16(cs[i].Scope), cs[i].Subject, cs[i].Hour, int16(cs[i].Key), cs[i].N
	}
	if _, err := s.pool.Exec(ctx, addAttemptCountsSQL, scope, subject, hour, key, n); err != nil {
		return fmt.Errorf("postgres: add attempt counts: %w", err)
	}
	return nil
}

// AttemptCounts returns the attempt_stats rows of scope (and subject, when
// not "") from from to to (storage.AttemptStats).
func (s *Store) AttemptCounts(ctx context.Context, scope storage.StatsScope, subject string, from, to time.Time) ([]storage.AttemptCount, error) {
	q := `SELECT subject, hour, key, n FROM attempt_stats WHERE scope = $1 AND hour >= $2 AND hour < $3`
	args := []any{int16(scope), from, to}
	if subject != "" {
		q += ` AND subject = $4`
		args = append(args, storage.CleanText(subject))
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY subject, hour, key`, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: attempt counts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.AttemptCount, error) {
		c := storage.AttemptCount{Scope: scope}
		var key int16
		err := r.Scan(&c.Subject, &c.Hour, &key, &c.N)
		c.Hour, c.Key = c.Hour.UTC(), int(key)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: attempt counts: %w", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// AttemptTotals returns the attempt_stats counts of scope (and subject,
// when not "") from from to to, summed by subject and key
// (storage.AttemptStats).
func (s *Store) AttemptTotals(ctx context.Context, scope storage.StatsScope, subject string, from, to time.Time) ([]storage.AttemptCount, error) {
	q := `SELECT subject, key, sum(n)::bigint FROM attempt_stats WHERE scope = $1 AND hour >= $2 AND hour < $3`
	args := []any{int16(scope), from, to}
	if subject != "" {
		q += ` AND subject = $4`
		args = append(args, storage.CleanText(subject))
	}
	rows, err := s.pool.Query(ctx, q+` GROUP BY subject, key ORDER BY subject, key`, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: attempt totals: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.AttemptCount, error) {
		c := storage.AttemptCount{Scope: scope, Hour: from.UTC()}
		var key int16
		err := r.Scan(&c.Subject, &key, &c.N)
		c.Key = int(key)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: attempt totals: %w", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// AttemptSubjects returns the subjects of scope with rows from from to to
// (storage.AttemptStats).
func (s *Store) AttemptSubjects(ctx context.Context, scope storage.StatsScope, from, to time.Time) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT subject FROM attempt_stats WHERE scope = $1 AND hour >= $2 AND hour < $3 ORDER BY subject`,
		int16(scope), from, to)
	if err != nil {
		return nil, fmt.Errorf("postgres: attempt subjects: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: attempt subjects: %w", err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// PruneAttemptCounts deletes the attempt_stats rows older than before, in
// batches of pruneBatch rows (storage.AttemptStats).
func (s *Store) PruneAttemptCounts(ctx context.Context, before time.Time) (int64, error) {
	n, err := s.pruneLoop(ctx, `DELETE FROM attempt_stats WHERE (scope, subject, hour, key) IN (
		SELECT scope, subject, hour, key FROM attempt_stats WHERE hour < $1 LIMIT `+fmt.Sprint(pruneBatch)+`)`, before)
	if err != nil {
		return n, fmt.Errorf("postgres: prune attempt counts: %w", err)
	}
	return n, nil
}
