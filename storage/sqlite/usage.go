package sqlite

import (
	"context"
	"fmt"

	"github.com/troupe-gw/troupe/storage"
)

const insertUsageSQL = `INSERT INTO usage_records (
	request_id, at, key_id, account_id, model, route, stream, status, error_class, attempts,
	latency_us, ttft_us, input_tokens, cached_tokens, output_tokens, reasoning_tokens
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(request_id) DO NOTHING`

// InsertUsage writes recs in one transaction through a prepared statement:
// either all are stored or none. At is stored with millisecond precision,
// Latency and TTFT with microsecond precision. An empty recs is a no-op.
// A record whose RequestID is already stored (or repeated within recs) is
// skipped, so a batch retried after an ambiguous failure is not doubled.
// Errors: storage.ErrInvalid when a record fails Validate (nothing is written).
func (s *Store) InsertUsage(ctx context.Context, recs []storage.UsageRecord) (err error) {
	if len(recs) == 0 {
		return nil
	}
	for i := range recs {
		if err := recs[i].Validate(); err != nil {
			return fmt.Errorf("sqlite: insert usage: record %d: %w", i, err)
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: insert usage: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that matters is err
		}
	}()
	stmt := tx.StmtContext(ctx, s.insertUsage)
	// The rows run under a context without cancellation: the driver would
	// otherwise start a watcher goroutine per row. Cancellation is still
	// honoured between rows (and the transaction rolled back).
	rowCtx := context.WithoutCancel(ctx)
	for i := range recs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sqlite: insert usage: %w", err)
		}
		r := &recs[i]
		_, err := stmt.ExecContext(rowCtx,
			r.RequestID, r.At.UnixMilli(), r.KeyID, r.AccountID, r.Model, r.Route,
			boolInt(r.Stream), r.Status, r.ErrorClass, r.Attempts,
			r.Latency.Microseconds(), r.TTFT.Microseconds(),
			r.InputTokens, r.CachedTokens, r.OutputTokens, r.ReasoningTokens)
		if err != nil {
			return fmt.Errorf("sqlite: insert usage: record %d of %d: %w", i, len(recs), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: insert usage: commit: %w", err)
	}
	return nil
}

// CountUsage returns the number of stored usage records.
func (s *Store) CountUsage(ctx context.Context) (int64, error) {
	var n int64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM usage_records`).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: count usage: %w", err)
	}
	return n, nil
}
