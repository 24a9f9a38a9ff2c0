package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

var _ storage.AttemptStats = (*Store)(nil)

// upsertAttemptCountSQL adds one count to its attempt_stats row.
const upsertAttemptCountSQL = `INSERT INTO attempt_stats (scope, subject, hour, key, n) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (scope, subject, hour, key) DO UPDATE SET n = n + excluded.n`

// AddAttemptCounts adds cs to their attempt_stats rows in one transaction
// (storage.AttemptStats).
func (s *Store) AddAttemptCounts(ctx context.Context, cs []storage.AttemptCount) (err error) {
	cs, err = storage.CoalesceAttemptCounts(cs)
	if err != nil {
		return fmt.Errorf("sqlite: add attempt counts: %w", err)
	}
	if len(cs) == 0 {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: add attempt counts: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that matters is err
		}
	}()
	stmt, err := tx.PrepareContext(ctx, upsertAttemptCountSQL)
	if err != nil {
		return fmt.Errorf("sqlite: add attempt counts: %w", err)
	}
	defer stmt.Close()
	rowCtx := context.WithoutCancel(ctx) // as in InsertUsage: no watcher goroutine per row
	for i := range cs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sqlite: add attempt counts: %w", err)
		}
		c := &cs[i]
		if _, err := stmt.ExecContext(rowCtx, int(c.Scope), c.Subject, c.Hour.UnixMilli(), c.Key, c.N); err != nil {
			return fmt.Errorf("sqlite: add attempt counts: row %d of %d: %w", i, len(cs), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: add attempt counts: commit: %w", err)
	}
	return nil
}

// AttemptCounts returns the attempt_stats rows of scope (and subject, when
// not "") from from to to (storage.AttemptStats).
func (s *Store) AttemptCounts(ctx context.Context, scope storage.StatsScope, subject string, from, to time.Time) ([]storage.AttemptCount, error) {
	q := `SELECT subject, hour, key, n FROM attempt_stats WHERE scope = ? AND hour >= ? AND hour < ?`
	args := []any{int(scope), from.UnixMilli(), to.UnixMilli()}
	if subject != "" {
		q += ` AND subject = ?`
		args = append(args, storage.CleanText(subject))
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY subject, hour, key`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempt counts: %w", err)
	}
	defer rows.Close()
	var out []storage.AttemptCount
	for rows.Next() {
		var (
			c    = storage.AttemptCount{Scope: scope}
			hour int64
		)
		if err := rows.Scan(&c.Subject, &hour, &c.Key, &c.N); err != nil {
			return nil, fmt.Errorf("sqlite: attempt counts: %w", err)
		}
		c.Hour = time.UnixMilli(hour).UTC()
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: attempt counts: %w", err)
	}
	return out, nil
}

// AttemptTotals returns the attempt_stats counts of scope (and subject,
// when not "") from from to to, summed by subject and key
// (storage.AttemptStats).
func (s *Store) AttemptTotals(ctx context.Context, scope storage.StatsScope, subject string, from, to time.Time) ([]storage.AttemptCount, error) {
	q := `SELECT subject, key, sum(n) FROM attempt_stats WHERE scope = ? AND hour >= ? AND hour < ?`
	args := []any{int(scope), from.UnixMilli(), to.UnixMilli()}
	if subject != "" {
		q += ` AND subject = ?`
		args = append(args, storage.CleanText(subject))
	}
	rows, err := s.r.QueryContext(ctx, q+` GROUP BY subject, key ORDER BY subject, key`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempt totals: %w", err)
	}
	defer rows.Close()
	var out []storage.AttemptCount
	for rows.Next() {
		c := storage.AttemptCount{Scope: scope, Hour: from.UTC()}
		if err := rows.Scan(&c.Subject, &c.Key, &c.N); err != nil {
			return nil, fmt.Errorf("sqlite: attempt totals: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: attempt totals: %w", err)
	}
	return out, nil
}

// AttemptSubjects returns the subjects of scope with rows from from to to
// (storage.AttemptStats).
func (s *Store) AttemptSubjects(ctx context.Context, scope storage.StatsScope, from, to time.Time) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT subject FROM attempt_stats WHERE scope = ? AND hour >= ? AND hour < ? ORDER BY subject`,
		int(scope), from.UnixMilli(), to.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("sqlite: attempt subjects: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var sub string
		if err := rows.Scan(&sub); err != nil {
			return nil, fmt.Errorf("sqlite: attempt subjects: %w", err)
		}
		out = append(out, sub)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: attempt subjects: %w", err)
	}
	return out, nil
}

// PruneAttemptCounts deletes the attempt_stats rows older than before, in
// batches of pruneBatch rows, each its own transaction, so that no write
// waits long behind it (storage.AttemptStats).
func (s *Store) PruneAttemptCounts(ctx context.Context, before time.Time) (int64, error) {
	n, err := s.pruneLoop(ctx, `DELETE FROM attempt_stats WHERE (scope, subject, hour, key) IN (
		SELECT scope, subject, hour, key FROM attempt_stats WHERE hour < ? LIMIT `+fmt.Sprint(pruneBatch)+`)`, before.UnixMilli())
	if err != nil {
		return n, fmt.Errorf("sqlite: prune attempt counts: %w", err)
	}
	return n, nil
}
