package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// insertErrorEventsSQL stores a batch of error events given as column
// arrays, in key order (so concurrent batches lock in the same order);
// events already stored are skipped.
const insertErrorEventsSQL = `INSERT INTO error_events (request_id, attempt, at, account_id, class, status, latency_us)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::timestamptz[], $4::text[], $5::text[], $6::bigint[], $7::bigint[])
ORDER BY 1, 2
ON CONFLICT (request_id, attempt) DO NOTHING`

// eventArrays are a batch's error events as the column arrays of insertErrorEventsSQL.
type eventArrays struct {
	request, account, class  []string
	attempt, status, latency []int64
	at                       []time.Time
}

// add appends evs, dropping repeats of a (request, attempt) within evs (the first is kept).
func (e *eventArrays) add(evs []storage.ErrorEvent) {
	type key struct {
		id      string
		attempt int
	}
	seen := make(map[key]struct{}, len(evs))
	for i := range evs {
		ev := &evs[i]
		id := storage.CleanText(ev.RequestID)
		if _, dup := seen[key{id, ev.Attempt}]; dup {
			continue
		}
		seen[key{id, ev.Attempt}] = struct{}{}
		e.request = append(e.request, id)
		e.attempt = append(e.attempt, int64(ev.Attempt))
		e.at = append(e.at, ev.At)
		e.account = append(e.account, storage.CleanText(ev.AccountID))
		e.class = append(e.class, storage.CleanText(ev.Class))
		e.status = append(e.status, int64(ev.Status))
		e.latency = append(e.latency, ev.Latency.Microseconds())
	}
}

// InsertErrorEvents writes evs in one statement (one transaction): all or
// none. Events whose (request_id, attempt) is stored, or repeated in evs (the
// first is kept), are skipped. Text PostgreSQL cannot hold is stored with
// U+FFFD in place of the bad bytes. An empty evs is a no-op. Errors:
// storage.ErrInvalid when an event fails Validate (nothing is written).
func (s *Store) InsertErrorEvents(ctx context.Context, evs []storage.ErrorEvent) error {
	if len(evs) == 0 {
		return nil
	}
	for i := range evs {
		if err := evs[i].Validate(); err != nil {
			return fmt.Errorf("postgres: insert error events: event %d: %w", i, err)
		}
	}
	var e eventArrays
	e.add(evs)
	if _, err := s.pool.Exec(ctx, insertErrorEventsSQL, e.request, e.attempt, e.at, e.account, e.class, e.status, e.latency); err != nil {
		return fmt.Errorf("postgres: insert error events: %w", err)
	}
	return nil
}

// window returns the WHERE clause and arguments of q's time window on
// column at, then the LIMIT placeholder's argument.
func window(q storage.RequestLogQuery) (string, []any) {
	var (
		where []string
		args  []any
	)
	if !q.From.IsZero() {
		args = append(args, q.From)
		where = append(where, fmt.Sprintf("at >= $%d", len(args)))
	}
	if !q.To.IsZero() {
		args = append(args, q.To)
		where = append(where, fmt.Sprintf("at < $%d", len(args)))
	}
	clause := ""
	if len(where) > 0 {
		clause = " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, q.Rows())
	return clause + fmt.Sprintf(" LIMIT $%d", len(args)), args
}

// UsageRecords returns the usage records whose At is in q's window, oldest
// first (then by request id), at most q.Rows() of them, with Errors nil.
// Times are UTC with microsecond precision.
func (s *Store) UsageRecords(ctx context.Context, q storage.RequestLogQuery) ([]storage.UsageRecord, error) {
	where, args := window(q)
	where = strings.Replace(where, " LIMIT", " ORDER BY at, request_id LIMIT", 1)
	rows, err := s.pool.Query(ctx, `SELECT request_id, at, key_id, account_id, model, route, stream, status,
	error_class, attempts, latency_us, ttft_us, input_tokens, cached_tokens, output_tokens, reasoning_tokens, decision, estimated
	FROM usage_records`+where, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: usage records: %w", err)
	}
	defer rows.Close()
	var out []storage.UsageRecord
	for rows.Next() {
		var (
			r                           storage.UsageRecord
			status, attempts, lat, ttft int64
		)
		if err := rows.Scan(&r.RequestID, &r.At, &r.KeyID, &r.AccountID, &r.Model, &r.Route, &r.Stream, &status,
			&r.ErrorClass, &attempts, &lat, &ttft, &r.InputTokens, &r.CachedTokens, &r.OutputTokens,
			&r.ReasoningTokens, &r.Decision, &r.Estimated); err != nil {
			return nil, fmt.Errorf("postgres: usage records: %w", err)
		}
		r.At = r.At.UTC()
		r.Status, r.Attempts = int(status), int(attempts)
		r.Latency, r.TTFT = time.Duration(lat)*time.Microsecond, time.Duration(ttft)*time.Microsecond
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: usage records: %w", err)
	}
	return out, nil
}

// ErrorEvents returns the error events whose At is in q's window, oldest
// first (then by request id and attempt), at most q.Rows() of them.
func (s *Store) ErrorEvents(ctx context.Context, q storage.RequestLogQuery) ([]storage.ErrorEvent, error) {
	where, args := window(q)
	where = strings.Replace(where, " LIMIT", " ORDER BY at, request_id, attempt LIMIT", 1)
	rows, err := s.pool.Query(ctx, `SELECT request_id, attempt, at, account_id, class, status, latency_us
	FROM error_events`+where, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: error events: %w", err)
	}
	defer rows.Close()
	var out []storage.ErrorEvent
	for rows.Next() {
		var (
			e                    storage.ErrorEvent
			attempt, status, lat int64
		)
		if err := rows.Scan(&e.RequestID, &attempt, &e.At, &e.AccountID, &e.Class, &status, &lat); err != nil {
			return nil, fmt.Errorf("postgres: error events: %w", err)
		}
		e.At = e.At.UTC()
		e.Attempt, e.Status, e.Latency = int(attempt), int(status), time.Duration(lat)*time.Microsecond
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: error events: %w", err)
	}
	return out, nil
}
