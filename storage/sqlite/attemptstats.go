package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
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

// attemptRowsPerTx is how many rows one transaction of AddAttemptCounts
// adds: five statements. Between its transactions the flush gives the
// writer's one connection back to the pool, so a usage batch waiting for
// it (the journal gives one a second, journal.DefaultAttemptTimeout) waits
// for one transaction of the flush, a few milliseconds, not for the whole
// flush: 63,000 rows at 5 µs each held the writer for 0.3 s on an idle
// machine and over a second on a loaded one (docs/benchmarks.md, issue 21,
// "usage batches and the statistics flush share the writer").
const attemptRowsPerTx = 5 * attemptRowsPerStmt

// attemptRepairTimeout bounds the work a failed AddAttemptCounts does after
// its context ended: finishing the batch, or taking back what it committed.
const attemptRepairTimeout = 30 * time.Second

// upsertAttemptCountsSQL adds n counts to their attempt_stats rows, one
// VALUES tuple (scope, subject, hour, key, n) a count; the rows of one
// statement are distinct (CoalesceAttemptCounts).
func upsertAttemptCountsSQL(n int) string {
	return valuesSQL(`INSERT INTO attempt_stats (scope, subject, hour, key, n) VALUES `, `(?,?,?,?,?)`, n,
		` ON CONFLICT (scope, subject, hour, key) DO UPDATE SET n = n + excluded.n`)
}

// AddAttemptCounts adds cs to their attempt_stats rows
// (storage.AttemptStats): attemptRowsPerStmt rows a statement and
// attemptRowsPerTx rows a transaction, the writer released between
// transactions so that other writes (usage batches) do not wait for the
// whole batch. All or none, as the interface says, when a transaction
// fails after others committed:
//
//   - if ctx ended and at least half the rows are committed, the rest are
//     added under a context without ctx's cancellation (at most
//     attemptRepairTimeout), and the batch succeeds: a flush cut short by
//     its timeout or by shutdown is not thrown away near its end;
//   - otherwise the committed rows are taken back (subtracted, in
//     transactions of attemptRowsPerTx, and the rows left at zero deleted)
//     under such a context, and the error returned.
//
// Only if taking back fails too (the error says so) may the caller's retry
// count those rows twice. Readers may see a batch's first transactions
// before its last, as they would see one flush before the next.
func (s *Store) AddAttemptCounts(ctx context.Context, cs []storage.AttemptCount) error {
	cs, err := storage.CoalesceAttemptCounts(cs)
	if err != nil {
		return fmt.Errorf("sqlite: add attempt counts: %w", err)
	}
	if len(cs) == 0 {
		return nil
	}
	a := attemptAdder{args: make([]any, 0, 5*attemptRowsPerStmt), total: len(cs)}
	defer a.close()
	done, err := s.addAttemptCountsTxs(ctx, &a, cs)
	if err == nil || done == 0 {
		return err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptRepairTimeout)
	defer cancel()
	if ctx.Err() != nil && len(cs)-done <= done {
		more, ferr := s.addAttemptCountsTxs(rctx, &a, cs[done:])
		if ferr == nil {
			return nil
		}
		done += more
		err = errors.Join(err, ferr)
	}
	if uerr := s.undoAttemptCounts(rctx, &a, cs[:done]); uerr != nil {
		return errors.Join(err, fmt.Errorf("sqlite: add attempt counts: taking back the %d rows already committed failed, a retry counts them twice: %w", done, uerr))
	}
	return err
}

// addAttemptCountsTxs adds cs, attemptRowsPerTx rows a transaction, and
// returns how many rows the committed transactions added.
func (s *Store) addAttemptCountsTxs(ctx context.Context, a *attemptAdder, cs []storage.AttemptCount) (int, error) {
	for done := 0; done < len(cs); done += attemptRowsPerTx {
		part := cs[done:min(done+attemptRowsPerTx, len(cs))]
		if err := s.addAttemptCountsTx(ctx, a, part); err != nil {
			return done, fmt.Errorf("sqlite: add attempt counts: %d rows of %d: %w", len(part), a.total, err)
		}
		if s.afterAttemptTx != nil {
			s.afterAttemptTx()
		}
	}
	return len(cs), nil
}

// undoAttemptCounts subtracts cs, rows a failed AddAttemptCounts committed,
// from their attempt_stats rows, attemptRowsPerTx rows a transaction, then
// deletes the rows of their hours that this leaves at zero (rows are never
// zero).
func (s *Store) undoAttemptCounts(ctx context.Context, a *attemptAdder, cs []storage.AttemptCount) error {
	neg := make([]storage.AttemptCount, len(cs))
	var hours []int64
	for i, c := range cs {
		c.N = -c.N
		neg[i] = c
		if h := c.Hour.UnixMilli(); !slices.Contains(hours, h) {
			hours = append(hours, h)
		}
	}
	if _, err := s.addAttemptCountsTxs(ctx, a, neg); err != nil {
		return err
	}
	for _, h := range hours {
		if _, err := s.w.ExecContext(ctx, `DELETE FROM attempt_stats WHERE hour = ? AND n = 0`, h); err != nil {
			return err
		}
	}
	return nil
}

// attemptAdder holds what the transactions of one AddAttemptCounts share.
type attemptAdder struct {
	total int       // rows in the batch
	full  *sql.Stmt // attemptRowsPerStmt rows, prepared on the writer once a batch
	args  []any     // one statement's arguments, reused
}

func (a *attemptAdder) close() {
	if a.full != nil {
		_ = a.full.Close() // nothing to do about it: the statement is the pool's
	}
}

// addAttemptCountsTx adds part in one transaction.
func (s *Store) addAttemptCountsTx(ctx context.Context, a *attemptAdder, part []storage.AttemptCount) (err error) {
	if a.full == nil && len(part) >= attemptRowsPerStmt {
		if a.full, err = s.w.PrepareContext(ctx, upsertAttemptCountsSQL(attemptRowsPerStmt)); err != nil {
			return err
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that matters is err
		}
	}()
	rowCtx := context.WithoutCancel(ctx) // as in InsertUsage: no watcher goroutine per statement
	// The arguments are int64s, driver.Values as they are (database/sql
	// would box an int a second time to convert it), and the subject and
	// hour that consecutive rows share (cs is sorted by scope, subject,
	// hour) are boxed once.
	var subject, hour any
	lastSubject, lastHour := "", int64(-1)
	for start := 0; start < len(part); start += attemptRowsPerStmt {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk := part[start:min(start+attemptRowsPerStmt, len(part))]
		a.args = a.args[:0]
		for i := range chunk {
			c := &chunk[i]
			if subject == nil || c.Subject != lastSubject {
				subject, lastSubject = c.Subject, c.Subject
			}
			if h := c.Hour.UnixMilli(); h != lastHour {
				hour, lastHour = h, h
			}
			a.args = append(a.args, int64(c.Scope), subject, hour, int64(c.Key), c.N)
		}
		var stmt *sql.Stmt
		if len(chunk) == attemptRowsPerStmt {
			stmt = tx.StmtContext(ctx, a.full) // the writer's one connection: prepared on it already
		} else {
			// The shorter last statement of a batch.
			if stmt, err = tx.PrepareContext(ctx, upsertAttemptCountsSQL(len(chunk))); err != nil {
				return err
			}
		}
		_, err := stmt.ExecContext(rowCtx, a.args...)
		_ = stmt.Close() // a Tx's statement: the one prepared on the pool stays
		if err != nil {
			return err
		}
	}
	return tx.Commit()
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
