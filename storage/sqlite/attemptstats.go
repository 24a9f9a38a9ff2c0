package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

var _ storage.AttemptStats = (*Store)(nil)

// attemptRowsPerStmt is how many rows one upsert statement of
// AddAttemptCounts adds. A flush at 1,000 req/s over 10,000 accounts holds
// about 25,000 rows; a statement per row cost each row a round through
// database/sql (its locks, the conversion of its arguments, a result) that
// the row does not need: 8 allocations a row, and a third more CPU
// (BenchmarkAddAttemptCounts, docs/benchmarks.md). 200 rows are 1,000
// parameters, far below SQLite's limit (32,766).
const attemptRowsPerStmt = 200

// upsertAttemptCountsSQL adds n counts to their attempt_stats rows, one
// VALUES tuple (scope, subject, hour, key, n) a count; the rows of one
// statement are distinct (CoalesceAttemptCounts).
func upsertAttemptCountsSQL(n int) string {
	return valuesSQL(`INSERT INTO attempt_stats (scope, subject, hour, key, n) VALUES `, `(?,?,?,?,?)`, n,
		` ON CONFLICT (scope, subject, hour, key) DO UPDATE SET n = n + excluded.n`)
}

// AddAttemptCounts adds cs to their attempt_stats rows in one transaction
// (storage.AttemptStats), attemptRowsPerStmt rows a statement.
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
	full, err := tx.PrepareContext(ctx, upsertAttemptCountsSQL(min(len(cs), attemptRowsPerStmt)))
	if err != nil {
		return fmt.Errorf("sqlite: add attempt counts: %w", err)
	}
	defer full.Close()
	rowCtx := context.WithoutCancel(ctx) // as in InsertUsage: no watcher goroutine per statement
	args := make([]any, 0, 5*attemptRowsPerStmt)
	// The arguments are int64s, driver.Values as they are (database/sql
	// would box an int a second time to convert it), and the subject and
	// hour that consecutive rows share (cs is sorted by scope, subject,
	// hour) are boxed once.
	var subject, hour any
	lastSubject, lastHour := "", int64(-1)
	for start := 0; start < len(cs); start += attemptRowsPerStmt {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sqlite: add attempt counts: %w", err)
		}
		chunk := cs[start:min(start+attemptRowsPerStmt, len(cs))]
		args = args[:0]
		for i := range chunk {
			c := &chunk[i]
			if subject == nil || c.Subject != lastSubject {
				subject, lastSubject = c.Subject, c.Subject
			}
			if h := c.Hour.UnixMilli(); h != lastHour {
				hour, lastHour = h, h
			}
			args = append(args, int64(c.Scope), subject, hour, int64(c.Key), c.N)
		}
		stmt := full
		if len(chunk) < attemptRowsPerStmt && len(chunk) < len(cs) {
			// The shorter last statement of a batch of several.
			if stmt, err = tx.PrepareContext(ctx, upsertAttemptCountsSQL(len(chunk))); err != nil {
				return fmt.Errorf("sqlite: add attempt counts: %w", err)
			}
			defer stmt.Close()
		}
		if _, err := stmt.ExecContext(rowCtx, args...); err != nil {
			return fmt.Errorf("sqlite: add attempt counts: rows %d-%d of %d: %w", start, start+len(chunk)-1, len(cs), err)
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
