package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/troupe-gw/troupe/storage"
)

// usageColumns are the columns of usage_records (and of the staging table),
// in the order usageSource yields them.
var usageColumns = []string{
	"request_id", "at", "key_id", "account_id", "model", "route", "stream", "status", "error_class", "attempts",
	"latency_us", "ttft_us", "input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens", "decision", "estimated",
	"cache_write_tokens", "user_id", "cost",
}

// insertStagedSQL moves the staged records into usage_records, skipping
// those whose request_id is stored, and adds exactly the inserted ones
// (RETURNING) to usage_hourly, their cost included; those of a user that exists (has a balance
// row) are added to usage_daily_users and, when they cost anything, charged:
// a ledger row each (a charge of that request already there is kept, not
// doubled) and their sum taken from the user's balance, all in the one
// statement. Rows are inserted and rollups upserted in key order, and the
// balances were locked in user order before (lockBalancesSQL), so that
// concurrent batches lock shared rows in the same order and cannot deadlock.
var insertStagedSQL = `WITH ins AS (
	INSERT INTO usage_records (` + strings.Join(usageColumns, ", ") + `)
	SELECT ` + strings.Join(usageColumns, ", ") + ` FROM ` + stagingTable + ` ORDER BY request_id
	ON CONFLICT (request_id) DO NOTHING
	RETURNING request_id, at, key_id, account_id, model, status, input_tokens, cached_tokens, output_tokens, reasoning_tokens, user_id, cost
), hourly AS (
	INSERT INTO usage_hourly AS h (hour, key_id, account_id, model, status,
		requests, input_tokens, cached_tokens, output_tokens, reasoning_tokens, cost)
	SELECT date_trunc('hour', at, 'UTC'), key_id, account_id, model, status,
		count(*), sum(input_tokens), sum(cached_tokens), sum(output_tokens), sum(reasoning_tokens), sum(cost)
	FROM ins
	GROUP BY 1, 2, 3, 4, 5
	ORDER BY 1, 2, 3, 4, 5
	ON CONFLICT (hour, key_id, account_id, model, status) DO UPDATE SET
		requests = h.requests + excluded.requests,
		input_tokens = h.input_tokens + excluded.input_tokens,
		cached_tokens = h.cached_tokens + excluded.cached_tokens,
		output_tokens = h.output_tokens + excluded.output_tokens,
		reasoning_tokens = h.reasoning_tokens + excluded.reasoning_tokens,
		cost = h.cost + excluded.cost
), billed AS (
	SELECT ins.* FROM ins JOIN balances b ON b.user_id = ins.user_id WHERE ins.user_id <> ''
), daily AS (
	INSERT INTO usage_daily_users AS d (day, user_id, model, requests, input_tokens, cached_tokens, output_tokens, cost)
	SELECT (at AT TIME ZONE 'UTC')::date, user_id, model, count(*), sum(input_tokens), sum(cached_tokens), sum(output_tokens), sum(greatest(cost, 0))
	FROM billed
	GROUP BY 1, 2, 3
	ORDER BY 1, 2, 3
	ON CONFLICT (day, user_id, model) DO UPDATE SET
		requests = d.requests + excluded.requests,
		input_tokens = d.input_tokens + excluded.input_tokens,
		cached_tokens = d.cached_tokens + excluded.cached_tokens,
		output_tokens = d.output_tokens + excluded.output_tokens,
		cost = d.cost + excluded.cost
), charged AS (
	INSERT INTO ledger (user_id, kind, amount, actor, note, request_id, created_at)
	SELECT user_id, 'charge', -cost, 'gateway', '', request_id, date_trunc('milliseconds', now())
	FROM billed WHERE cost > 0
	ORDER BY request_id
	ON CONFLICT DO NOTHING
	RETURNING user_id, amount
)
UPDATE balances AS b SET balance = greatest(b.balance + c.amount, -9223372036854775808), updated_at = date_trunc('milliseconds', now())
FROM (SELECT user_id, sum(amount) AS amount FROM charged GROUP BY user_id) c
WHERE b.user_id = c.user_id`

// lockBalancesSQL locks, in user order, the balances the staged records may
// charge, before insertStagedSQL updates them in an order of its own.
const lockBalancesSQL = `SELECT 1 FROM balances WHERE user_id IN (SELECT user_id FROM ` + stagingTable + ` WHERE user_id <> '')
ORDER BY user_id FOR NO KEY UPDATE`

// pruneBatch is how many rows one DELETE of PruneUsage removes: each batch is
// its own short transaction.
const pruneBatch = 5000

// maxAttempts bounds InsertUsage's retries of a transaction that PostgreSQL
// aborted to break a deadlock or a serialization conflict.
const maxAttempts = 5

// usageSource feeds records to CopyFrom without allocating per value: the
// values point into recs and into the scratch slices (see textRef).
type usageSource struct {
	recs     []storage.UsageRecord
	keep     []bool // records to copy (the first of each RequestID)
	text     [][8]string
	users    bool // some record has a UserID: lock balances first
	lat, ttf []int64
	status   []int64
	attempts []int64
	i        int
	vals     []any
}

// Next moves to the next record to copy, skipping dropped duplicates.
func (u *usageSource) Next() bool {
	for u.i++; u.i < len(u.recs) && !u.keep[u.i]; u.i++ {
	}
	return u.i < len(u.recs)
}

// Values returns the current record's columns, in usageColumns order.
func (u *usageSource) Values() ([]any, error) {
	i, r, t := u.i, &u.recs[u.i], &u.text[u.i]
	v := u.vals[:0]
	v = append(v, textRef{&t[0]}, timeRef{&r.At}, textRef{&t[1]}, textRef{&t[2]}, textRef{&t[3]}, textRef{&t[4]},
		boolRef{&r.Stream}, int8Ref{&u.status[i]}, textRef{&t[5]}, int8Ref{&u.attempts[i]},
		int8Ref{&u.lat[i]}, int8Ref{&u.ttf[i]}, int8Ref{&r.InputTokens}, int8Ref{&r.CachedTokens},
		int8Ref{&r.OutputTokens}, int8Ref{&r.ReasoningTokens}, textRef{&t[6]}, boolRef{&r.Estimated},
		int8Ref{&r.CacheWriteTokens}, textRef{&t[7]}, int8Ref{&r.Cost})
	u.vals = v
	return v, nil
}

// The ref types hand a value to pgx's encoders through its Valuer
// interfaces. Each holds one pointer, so storing it in an interface does not
// allocate (a plain value would be boxed, and a plain pointer is
// dereferenced by reflection, which allocates too).
type (
	textRef struct{ p *string }
	int8Ref struct{ p *int64 }
	boolRef struct{ p *bool }
	timeRef struct{ p *time.Time }
)

func (r textRef) TextValue() (pgtype.Text, error)  { return pgtype.Text{String: *r.p, Valid: true}, nil }
func (r int8Ref) Int64Value() (pgtype.Int8, error) { return pgtype.Int8{Int64: *r.p, Valid: true}, nil }
func (r boolRef) BoolValue() (pgtype.Bool, error)  { return pgtype.Bool{Bool: *r.p, Valid: true}, nil }
func (r timeRef) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: *r.p, Valid: true}, nil
}

// Err reports no error: the records were validated before the copy.
func (u *usageSource) Err() error { return nil }

// newUsageSource prepares recs for copying: text made storable (see
// cleanText) and duplicates of a RequestID within recs dropped (the first is
// kept), so that a batch's rows are unique before they reach the database.
func newUsageSource(recs []storage.UsageRecord) *usageSource {
	n := len(recs)
	u := &usageSource{
		recs: recs, keep: make([]bool, n), text: make([][8]string, n),
		lat: make([]int64, n), ttf: make([]int64, n), status: make([]int64, n), attempts: make([]int64, n),
		vals: make([]any, 0, len(usageColumns)),
	}
	seen := make(map[string]struct{}, n)
	for i := range recs {
		r := &recs[i]
		id := storage.CleanText(r.RequestID)
		if _, dup := seen[id]; dup {
			continue
		}
		seen[id] = struct{}{}
		u.keep[i] = true
		u.text[i] = [8]string{id, storage.CleanText(r.KeyID), storage.CleanText(r.AccountID), storage.CleanText(r.Model), storage.CleanText(r.Route), storage.CleanText(r.ErrorClass), storage.CleanText(r.Decision), storage.CleanText(r.UserID)}
		u.users = u.users || r.UserID != ""
		u.lat[i], u.ttf[i] = r.Latency.Microseconds(), r.TTFT.Microseconds()
		u.status[i], u.attempts[i] = int64(r.Status), int64(r.Attempts)
	}
	return u
}

// InsertUsage writes recs in one transaction: either all are stored or none.
// The records are streamed with COPY into a temporary staging table, then
// moved into usage_records by one INSERT … SELECT … ON CONFLICT (request_id)
// DO NOTHING whose RETURNING rows — exactly the records stored — are summed
// into usage_hourly in the same statement. A record whose RequestID is
// already stored (or repeated within recs: the first one is kept) is thus
// skipped and not counted, even when several instances write the same batch
// at once. At is stored with microsecond precision, Latency and TTFT as
// microseconds; text that PostgreSQL cannot hold (invalid UTF-8, NUL bytes)
// is stored with U+FFFD in place of the bad bytes rather than losing the
// batch. A transaction aborted by a deadlock or serialization failure is
// retried. An empty recs is a no-op. Errors: storage.ErrInvalid
// when a record fails Validate (nothing is written).
func (s *Store) InsertUsage(ctx context.Context, recs []storage.UsageRecord) error {
	if len(recs) == 0 {
		return nil
	}
	for i := range recs {
		if err := recs[i].Validate(); err != nil {
			return fmt.Errorf("postgres: insert usage: record %d: %w", i, err)
		}
		recs[i].Bound()
	}
	src := newUsageSource(recs)
	var err error
	create := false
	for range maxAttempts {
		src.i = -1
		if err = s.insertUsage(ctx, src, create); err == nil {
			return nil
		}
		switch pgCode(err) {
		case "40P01", "40001": // deadlock, serialization failure: try again
		case "42P01": // no staging table: the connection was reset, or is not the one AfterConnect saw (a pooler)
			create = true
		default:
			return fmt.Errorf("postgres: insert usage: %w", err)
		}
	}
	return fmt.Errorf("postgres: insert usage: %w", err)
}

// insertUsage runs one attempt of InsertUsage; create makes it create the
// staging table first, in the transaction.
func (s *Store) insertUsage(ctx context.Context, src *usageSource, create bool) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if create {
			if _, err := tx.Exec(ctx, createStagingSQL); err != nil {
				return fmt.Errorf("create staging table: %w", err)
			}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{stagingTable}, usageColumns, src); err != nil {
			return fmt.Errorf("copy: %w", err)
		}
		if src.users {
			if _, err := tx.Exec(ctx, lockBalancesSQL); err != nil {
				return fmt.Errorf("lock balances: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, insertStagedSQL); err != nil {
			return err
		}
		return nil
	})
}

// CountUsage returns the number of stored usage records.
func (s *Store) CountUsage(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM usage_records`).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count usage: %w", err)
	}
	return n, nil
}

// Rollups returns the usage_hourly rows matching q (see storage.UsageQuery),
// ordered by hour, key, account, model (bytewise) and status. Hours are UTC;
// an empty result is a nil slice.
func (s *Store) Rollups(ctx context.Context, q storage.UsageQuery) ([]storage.UsageRollup, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if !q.From.IsZero() {
		add("hour >= $%d", q.From)
	}
	if !q.To.IsZero() {
		add("hour < $%d", q.To)
	}
	for _, f := range []struct{ col, v string }{{"key_id", q.KeyID}, {"account_id", q.AccountID}, {"model", q.Model}} {
		if f.v != "" {
			add(f.col+" = $%d", storage.CleanText(f.v))
		}
	}
	query := `SELECT hour, key_id, account_id, model, status, requests, input_tokens, cached_tokens,
	output_tokens, reasoning_tokens, cost FROM usage_hourly`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY hour, key_id, account_id, model, status"
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: rollups: %w", err)
	}
	defer rows.Close()
	var out []storage.UsageRollup
	for rows.Next() {
		var (
			r      storage.UsageRollup
			status int64
		)
		if err := rows.Scan(&r.Hour, &r.KeyID, &r.AccountID, &r.Model, &status, &r.Requests,
			&r.InputTokens, &r.CachedTokens, &r.OutputTokens, &r.ReasoningTokens, &r.Cost); err != nil {
			return nil, fmt.Errorf("postgres: rollups: %w", err)
		}
		r.Hour = r.Hour.UTC()
		r.Status = int(status)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: rollups: %w", err)
	}
	return out, nil
}

// PruneUsage deletes the usage records whose At is before recordsBefore and
// the rollup rows whose hour is before rollupsBefore, in batches of 5,000
// rows, each its own transaction (short row locks, no table lock), and
// returns how many of each it deleted. On an error or cancellation the
// batches already committed stay deleted and their counts are returned with
// the error. A zero time deletes nothing.
func (s *Store) PruneUsage(ctx context.Context, recordsBefore, rollupsBefore time.Time) (records, rollups int64, err error) {
	if !recordsBefore.IsZero() {
		records, err = s.pruneLoop(ctx, `DELETE FROM usage_records WHERE request_id IN (
			SELECT request_id FROM usage_records WHERE at < $1 LIMIT `+fmt.Sprint(pruneBatch)+`)`, recordsBefore)
		if err != nil {
			return records, 0, fmt.Errorf("postgres: prune usage records: %w", err)
		}
		if _, err = s.pruneLoop(ctx, `DELETE FROM error_events WHERE (request_id, attempt) IN (
			SELECT request_id, attempt FROM error_events WHERE at < $1 LIMIT `+fmt.Sprint(pruneBatch)+`)`, recordsBefore); err != nil {
			return records, 0, fmt.Errorf("postgres: prune error events: %w", err)
		}
	}
	if !rollupsBefore.IsZero() {
		rollups, err = s.pruneLoop(ctx, `DELETE FROM usage_hourly WHERE (hour, key_id, account_id, model, status) IN (
			SELECT hour, key_id, account_id, model, status FROM usage_hourly WHERE hour < $1 LIMIT `+fmt.Sprint(pruneBatch)+`)`, rollupsBefore)
		if err != nil {
			return records, rollups, fmt.Errorf("postgres: prune usage rollups: %w", err)
		}
	}
	return records, rollups, nil
}

// pruneLoop runs the batch DELETE query until it deletes fewer than a batch.
func (s *Store) pruneLoop(ctx context.Context, query string, before time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, query, before)
		if err != nil {
			return total, err
		}
		n := tag.RowsAffected()
		total += n
		if n < pruneBatch {
			return total, nil
		}
	}
}
