package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

const adminUserColumns = `id, username, password_hash, disabled, created_at, updated_at, last_login_at`

// matchIDOrUsername is matchIDOrName for admin_users.
const matchIDOrUsername = `(id = ?1 OR username = ?1) ORDER BY id = ?1 DESC LIMIT 1`

// CreateAdminUser stores u and returns it as stored: ID a fresh UUID when
// empty, CreatedAt and UpdatedAt now (millisecond precision, UTC).
// Errors: storage.ErrInvalid when u fails Validate; storage.ErrConflict
// when the ID or Username is taken.
func (s *Store) CreateAdminUser(ctx context.Context, u storage.AdminUser) (storage.AdminUser, error) {
	if err := u.Validate(); err != nil {
		return storage.AdminUser{}, fmt.Errorf("sqlite: create admin user: %w", err)
	}
	if u.ID == "" {
		u.ID = newID()
	}
	u.CreatedAt = now()
	u.UpdatedAt = u.CreatedAt
	_, err := s.w.ExecContext(ctx, `INSERT INTO admin_users (`+adminUserColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		u.ID, u.Username, u.PasswordHash, boolInt(u.Disabled), toMillis(u.CreatedAt), toMillis(u.UpdatedAt), optMillis(u.LastLoginAt))
	if isConstraint(err) {
		return storage.AdminUser{}, conflict(fmt.Sprintf("create admin user %q", u.Username), err)
	}
	if err != nil {
		return storage.AdminUser{}, fmt.Errorf("sqlite: create admin user %q: %w", u.Username, err)
	}
	u.LastLoginAt = truncMillis(u.LastLoginAt)
	return u, nil
}

// GetAdminUser returns the user whose ID, or else Username, is idOrUsername,
// or an error wrapping storage.ErrNotFound.
func (s *Store) GetAdminUser(ctx context.Context, idOrUsername string) (storage.AdminUser, error) {
	u, err := scanAdminUser(s.r.QueryRowContext(ctx, `SELECT `+adminUserColumns+` FROM admin_users WHERE `+matchIDOrUsername, idOrUsername))
	if errors.Is(err, sql.ErrNoRows) {
		return storage.AdminUser{}, fmt.Errorf("sqlite: admin user %q: %w", idOrUsername, storage.ErrNotFound)
	}
	if err != nil {
		return storage.AdminUser{}, fmt.Errorf("sqlite: get admin user %q: %w", idOrUsername, err)
	}
	return u, nil
}

// ListAdminUsers returns every admin user ordered by username (bytewise);
// an empty, non-nil slice when there are none.
func (s *Store) ListAdminUsers(ctx context.Context) ([]storage.AdminUser, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+adminUserColumns+` FROM admin_users ORDER BY username`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list admin users: %w", err)
	}
	defer rows.Close()
	out := []storage.AdminUser{}
	for rows.Next() {
		u, err := scanAdminUser(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list admin users: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list admin users: %w", err)
	}
	return out, nil
}

// UpdateAdminUser replaces PasswordHash, Disabled and LastLoginAt of the
// user whose ID is u.ID, stamps UpdatedAt and returns the user as stored.
// Errors: storage.ErrInvalid when u fails Validate (its Username must be
// valid but is not changed); storage.ErrNotFound when no user has the ID.
func (s *Store) UpdateAdminUser(ctx context.Context, u storage.AdminUser) (storage.AdminUser, error) {
	if err := u.Validate(); err != nil {
		return storage.AdminUser{}, fmt.Errorf("sqlite: update admin user: %w", err)
	}
	res, err := s.w.ExecContext(ctx, `UPDATE admin_users SET password_hash = ?, disabled = ?, last_login_at = ?, updated_at = ? WHERE id = ?`,
		u.PasswordHash, boolInt(u.Disabled), optMillis(u.LastLoginAt), toMillis(now()), u.ID)
	if err != nil {
		return storage.AdminUser{}, fmt.Errorf("sqlite: update admin user %q: %w", u.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return storage.AdminUser{}, fmt.Errorf("sqlite: update admin user %q: %w", u.ID, err)
		}
		return storage.AdminUser{}, fmt.Errorf("sqlite: admin user %q: %w", u.ID, storage.ErrNotFound)
	}
	return s.getAdminUserW(ctx, u.ID)
}

// getAdminUserW reads a user back through the writer, so a write is seen at once.
func (s *Store) getAdminUserW(ctx context.Context, id string) (storage.AdminUser, error) {
	u, err := scanAdminUser(s.w.QueryRowContext(ctx, `SELECT `+adminUserColumns+` FROM admin_users WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return storage.AdminUser{}, fmt.Errorf("sqlite: admin user %q: %w", id, storage.ErrNotFound)
	}
	if err != nil {
		return storage.AdminUser{}, fmt.Errorf("sqlite: get admin user %q: %w", id, err)
	}
	return u, nil
}

// DeleteAdminUser removes the user whose ID, or else Username, is
// idOrUsername, or returns an error wrapping storage.ErrNotFound.
func (s *Store) DeleteAdminUser(ctx context.Context, idOrUsername string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM admin_users WHERE id = (SELECT id FROM admin_users WHERE `+matchIDOrUsername+`)`, idOrUsername)
	if err != nil {
		return fmt.Errorf("sqlite: delete admin user %q: %w", idOrUsername, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		if err != nil {
			return fmt.Errorf("sqlite: delete admin user %q: %w", idOrUsername, err)
		}
		return fmt.Errorf("sqlite: admin user %q: %w", idOrUsername, storage.ErrNotFound)
	}
	return nil
}

type rowScanner interface{ Scan(dest ...any) error }

func scanAdminUser(r rowScanner) (storage.AdminUser, error) {
	var (
		u                storage.AdminUser
		disabled         int
		created, updated int64
		lastLogin        sql.NullInt64
	)
	if err := r.Scan(&u.ID, &u.Username, &u.PasswordHash, &disabled, &created, &updated, &lastLogin); err != nil {
		return storage.AdminUser{}, err
	}
	u.Disabled = disabled != 0
	u.CreatedAt, u.UpdatedAt = fromMillis(created), fromMillis(updated)
	if lastLogin.Valid {
		t := fromMillis(lastLogin.Int64)
		u.LastLoginAt = &t
	}
	return u, nil
}

// ListUsageRecords returns the usage records matching q (see
// storage.UsageRecordQuery), newest first, at most q.PageLimit(); nil when
// none match. Filters on text compare the stored (cleaned) text.
func (s *Store) ListUsageRecords(ctx context.Context, q storage.UsageRecordQuery) ([]storage.UsageRecord, error) {
	query, args := listUsageQuery(q)
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list usage records: %w", err)
	}
	defer rows.Close()
	var out []storage.UsageRecord
	for rows.Next() {
		var (
			r             storage.UsageRecord
			at, lat, ttft int64
			stream, est   int
		)
		if err := rows.Scan(&r.RequestID, &at, &r.KeyID, &r.AccountID, &r.Model, &r.Route, &stream, &r.Status, &r.ErrorClass,
			&r.Attempts, &lat, &ttft, &r.InputTokens, &r.CachedTokens, &r.OutputTokens, &r.ReasoningTokens, &est,
			&r.CacheWriteTokens, &r.UserID, &r.Cost); err != nil {
			return nil, fmt.Errorf("sqlite: list usage records: %w", err)
		}
		r.At, r.Stream, r.Estimated = fromMillis(at), stream != 0, est != 0
		r.Latency, r.TTFT = microseconds(lat), microseconds(ttft)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list usage records: %w", err)
	}
	return out, nil
}

// listUsageQuery is ListUsageRecords' statement and arguments. A user's
// records are read through usage_records_user_at, whose rows are those with
// a user (WHERE user_id <> ”): the query says so, since SQLite cannot tell
// that the bound user id is not empty, and without it a user's page over a
// time range or after a cursor scanned every user's records newest first.
func listUsageQuery(q storage.UsageRecordQuery) (string, []any) {
	var (
		where []string
		args  []any
	)
	if !q.From.IsZero() {
		where, args = append(where, "at >= ?"), append(args, toMillis(q.From))
	}
	if !q.To.IsZero() {
		where, args = append(where, "at < ?"), append(args, toMillis(q.To))
	}
	for _, f := range []struct{ col, v string }{{"key_id", q.KeyID}, {"account_id", q.AccountID}, {"model", q.Model}, {"user_id", q.UserID}} {
		if f.v != "" {
			where, args = append(where, f.col+" = ?"), append(args, storage.CleanText(f.v))
		}
	}
	if q.UserID != "" {
		where = append(where, "user_id <> ''")
	}
	if q.Status != 0 {
		where, args = append(where, "status = ?"), append(args, q.Status)
	}
	if q.FailedOnly {
		where = append(where, "status >= 400")
	}
	if q.After.RequestID != "" {
		// As a row value, the index range starts at the cursor; spelled
		// (at < ? OR (at = ? AND request_id < ?)), SQLite scanned the index
		// from the newest record and filtered every one up to the cursor
		// (BenchmarkUsageQueries/list/after-cursor).
		where, args = append(where, "(at, request_id) < (?, ?)"), append(args, toMillis(q.After.At), q.After.RequestID)
	}
	query := `SELECT request_id, at, key_id, account_id, model, route, stream, status, error_class, attempts,
	latency_us, ttft_us, input_tokens, cached_tokens, output_tokens, reasoning_tokens, estimated,
	cache_write_tokens, user_id, cost FROM usage_records`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += fmt.Sprintf(" ORDER BY at DESC, request_id DESC LIMIT %d", q.PageLimit())
	return query, args
}

// optMillis stores an optional time as unix ms, or NULL.
func optMillis(t *time.Time) any {
	if t == nil {
		return nil
	}
	return toMillis(*t)
}

// truncMillis returns t at the precision stored (nil stays nil).
func truncMillis(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	v := fromMillis(toMillis(*t))
	return &v
}

func microseconds(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
