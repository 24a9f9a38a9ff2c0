package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// InsertErrorEvents writes evs in one transaction through a prepared
// statement: all or none. Events whose (request_id, attempt) is stored, or
// repeated in evs (the first is kept), are skipped. At is stored with
// millisecond precision, Latency with microsecond precision; text that is not
// valid UTF-8 or holds NUL bytes is stored with U+FFFD in place of the bad
// bytes. An empty evs is a no-op. Errors: storage.ErrInvalid when an event
// fails Validate (nothing is written).
func (s *Store) InsertErrorEvents(ctx context.Context, evs []storage.ErrorEvent) (err error) {
	if len(evs) == 0 {
		return nil
	}
	for i := range evs {
		if err := evs[i].Validate(); err != nil {
			return fmt.Errorf("sqlite: insert error events: event %d: %w", i, err)
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: insert error events: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that matters is err
		}
	}()
	stmt := tx.StmtContext(ctx, s.insertErrorEvent)
	rowCtx := context.WithoutCancel(ctx) // as in InsertUsage: no watcher goroutine per row
	for i := range evs {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sqlite: insert error events: %w", err)
		}
		ev := &evs[i]
		if _, err := stmt.ExecContext(rowCtx, storage.CleanText(ev.RequestID), ev.Attempt, ev.At.UnixMilli(),
			storage.CleanText(ev.AccountID), storage.CleanText(ev.Class), ev.Status, ev.Latency.Microseconds()); err != nil {
			return fmt.Errorf("sqlite: insert error events: event %d of %d: %w", i, len(evs), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: insert error events: commit: %w", err)
	}
	return nil
}

// window returns the WHERE clause and arguments of q's time window on column at.
func window(q storage.RequestLogQuery) (string, []any) {
	where, args := "", []any{}
	add := func(cond string, v any) {
		if where == "" {
			where = " WHERE " + cond
		} else {
			where += " AND " + cond
		}
		args = append(args, v)
	}
	if !q.From.IsZero() {
		add("at >= ?", toMillis(q.From))
	}
	if !q.To.IsZero() {
		add("at < ?", toMillis(q.To))
	}
	return where, args
}

// UsageRecords returns the usage records whose At is in q's window, oldest
// first (then by request id), at most q.Rows() of them, with Errors nil.
// Times have millisecond precision (At) and microsecond precision (Latency, TTFT).
func (s *Store) UsageRecords(ctx context.Context, q storage.RequestLogQuery) ([]storage.UsageRecord, error) {
	where, args := window(q)
	rows, err := s.r.QueryContext(ctx, `SELECT request_id, at, key_id, account_id, model, route, stream, status,
	error_class, attempts, latency_us, ttft_us, input_tokens, cached_tokens, output_tokens, reasoning_tokens, decision, estimated
	FROM usage_records`+where+` ORDER BY at, request_id LIMIT ?`, append(args, q.Rows())...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: usage records: %w", err)
	}
	defer rows.Close()
	var out []storage.UsageRecord
	for rows.Next() {
		var (
			r             storage.UsageRecord
			at, lat, ttft int64
			stream, est   int
		)
		if err := rows.Scan(&r.RequestID, &at, &r.KeyID, &r.AccountID, &r.Model, &r.Route, &stream, &r.Status,
			&r.ErrorClass, &r.Attempts, &lat, &ttft, &r.InputTokens, &r.CachedTokens, &r.OutputTokens,
			&r.ReasoningTokens, &r.Decision, &est); err != nil {
			return nil, fmt.Errorf("sqlite: usage records: %w", err)
		}
		r.At, r.Stream, r.Estimated = fromMillis(at), stream != 0, est != 0
		r.Latency, r.TTFT = time.Duration(lat)*time.Microsecond, time.Duration(ttft)*time.Microsecond
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: usage records: %w", err)
	}
	return out, nil
}

// ErrorEvents returns the error events whose At is in q's window, oldest
// first (then by request id and attempt), at most q.Rows() of them.
func (s *Store) ErrorEvents(ctx context.Context, q storage.RequestLogQuery) ([]storage.ErrorEvent, error) {
	where, args := window(q)
	rows, err := s.r.QueryContext(ctx, `SELECT request_id, attempt, at, account_id, class, status, latency_us
	FROM error_events`+where+` ORDER BY at, request_id, attempt LIMIT ?`, append(args, q.Rows())...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: error events: %w", err)
	}
	defer rows.Close()
	var out []storage.ErrorEvent
	for rows.Next() {
		var (
			e       storage.ErrorEvent
			at, lat int64
		)
		if err := rows.Scan(&e.RequestID, &e.Attempt, &at, &e.AccountID, &e.Class, &e.Status, &lat); err != nil {
			return nil, fmt.Errorf("sqlite: error events: %w", err)
		}
		e.At, e.Latency = fromMillis(at), time.Duration(lat)*time.Microsecond
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: error events: %w", err)
	}
	return out, nil
}
