package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"strings"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/troupe-gw/troupe/storage"
)

const userColumns = `id, name, email, password_hash, grp, disabled, models, rpm, max_concurrency, created_at, updated_at, last_login_at`

// CreateUser stores u with a balance of 0, redeems n.Invitation and credits
// n.Balance in one transaction (see storage.Users).
func (s *Store) CreateUser(ctx context.Context, u storage.User, n storage.NewUser) (_ storage.User, err error) {
	if err := u.Validate(); err != nil {
		return storage.User{}, fmt.Errorf("sqlite: create user: %w", err)
	}
	if n.Balance < 0 {
		return storage.User{}, fmt.Errorf("sqlite: create user %q: %w: negative starting balance", u.Name, storage.ErrInvalid)
	}
	if u.ID == "" {
		u.ID = newID()
	}
	u.CreatedAt = now()
	u.UpdatedAt = u.CreatedAt
	u.LastLoginAt = truncMillis(u.LastLoginAt)
	u.Models = normList(u.Models)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return storage.User{}, fmt.Errorf("sqlite: create user: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if n.Invitation != "" {
		res, err := tx.ExecContext(ctx, `UPDATE invitations SET uses = uses + 1
			WHERE hash = ? AND NOT disabled AND uses < max_uses AND (expires_at IS NULL OR expires_at > ?)`,
			n.Invitation, toMillis(u.CreatedAt))
		if err != nil {
			return storage.User{}, fmt.Errorf("sqlite: create user %q: redeem invitation: %w", u.Name, err)
		}
		if k, _ := res.RowsAffected(); k != 1 {
			return storage.User{}, fmt.Errorf("sqlite: create user %q: %w: the invitation code is unknown, used up, disabled or expired", u.Name, storage.ErrInvalid)
		}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO users (`+userColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		u.ID, u.Name, u.Email, u.PasswordHash, u.Group, boolInt(u.Disabled), encodeList(u.Models), u.RPM, u.MaxConcurrency,
		toMillis(u.CreatedAt), toMillis(u.UpdatedAt), optMillis(u.LastLoginAt))
	if isConstraint(err) {
		return storage.User{}, conflict(fmt.Sprintf("create user %q", u.Name), err)
	}
	if err != nil {
		return storage.User{}, fmt.Errorf("sqlite: create user %q: %w", u.Name, err)
	}
	if _, err = tx.ExecContext(ctx, `INSERT INTO balances (user_id, balance, updated_at) VALUES (?, 0, ?)`, u.ID, toMillis(u.CreatedAt)); err != nil {
		return storage.User{}, fmt.Errorf("sqlite: create user %q: balance: %w", u.Name, err)
	}
	if n.Balance > 0 {
		e := storage.LedgerEntry{UserID: u.ID, Kind: storage.LedgerTopup, Amount: n.Balance, Actor: n.Actor, Note: n.Note}
		if _, err = postLedger(ctx, tx, e); err != nil {
			return storage.User{}, err
		}
	}
	if err = tx.Commit(); err != nil {
		return storage.User{}, fmt.Errorf("sqlite: create user %q: commit: %w", u.Name, err)
	}
	return u, nil
}

// GetUser returns the user whose ID, else Name, else Email is idNameOrEmail.
func (s *Store) GetUser(ctx context.Context, idNameOrEmail string) (storage.User, error) {
	return s.getUser(ctx, s.r, idNameOrEmail)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (s *Store) getUser(ctx context.Context, db querier, key string) (storage.User, error) {
	if key == "" {
		return storage.User{}, fmt.Errorf("sqlite: user %q: %w", key, storage.ErrNotFound)
	}
	u, err := scanUser(db.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users
		WHERE id = ?1 OR name = ?1 OR email = ?1 ORDER BY id = ?1 DESC, name = ?1 DESC LIMIT 1`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return storage.User{}, fmt.Errorf("sqlite: user %q: %w", key, storage.ErrNotFound)
	}
	if err != nil {
		return storage.User{}, fmt.Errorf("sqlite: get user %q: %w", key, err)
	}
	return u, nil
}

// ListUsers returns every user ordered by name (bytewise).
func (s *Store) ListUsers(ctx context.Context) ([]storage.User, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+userColumns+` FROM users ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list users: %w", err)
	}
	defer rows.Close()
	out := []storage.User{}
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list users: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list users: %w", err)
	}
	return out, nil
}

// UpdateUser replaces the mutable fields of the user with u.ID.
func (s *Store) UpdateUser(ctx context.Context, u storage.User) (storage.User, error) {
	if err := u.Validate(); err != nil {
		return storage.User{}, fmt.Errorf("sqlite: update user: %w", err)
	}
	got, err := scanUser(s.w.QueryRowContext(ctx, `UPDATE users SET name = ?, email = ?, password_hash = ?, grp = ?, disabled = ?,
		models = ?, rpm = ?, max_concurrency = ?, last_login_at = ?, updated_at = max(updated_at + 1, ?)
		WHERE id = ? AND (? = 0 OR updated_at = ?) RETURNING `+userColumns,
		u.Name, u.Email, u.PasswordHash, u.Group, boolInt(u.Disabled), encodeList(u.Models), u.RPM, u.MaxConcurrency,
		optMillis(u.LastLoginAt), toMillis(now()), u.ID, ifMillis(u.IfUpdatedAt), ifMillis(u.IfUpdatedAt)))
	switch {
	case errors.Is(err, sql.ErrNoRows) && !u.IfUpdatedAt.IsZero():
		if _, gerr := s.GetUser(ctx, u.ID); gerr == nil {
			return storage.User{}, fmt.Errorf("sqlite: update user %q: %w", u.ID, storage.ErrStale)
		}
		return storage.User{}, fmt.Errorf("sqlite: user %q: %w", u.ID, storage.ErrNotFound)
	case errors.Is(err, sql.ErrNoRows):
		return storage.User{}, fmt.Errorf("sqlite: user %q: %w", u.ID, storage.ErrNotFound)
	case isConstraint(err):
		return storage.User{}, conflict(fmt.Sprintf("update user %q", u.ID), err)
	case err != nil:
		return storage.User{}, fmt.Errorf("sqlite: update user %q: %w", u.ID, err)
	}
	return got, nil
}

// SetUserLastLogin sets only last_login_at of the user with ID id; its
// updated_at (the version admins edit against) stays.
func (s *Store) SetUserLastLogin(ctx context.Context, id string, at time.Time) (storage.User, error) {
	got, err := scanUser(s.w.QueryRowContext(ctx, `UPDATE users SET last_login_at = ? WHERE id = ? RETURNING `+userColumns, toMillis(at), id))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return storage.User{}, fmt.Errorf("sqlite: user %q: %w", id, storage.ErrNotFound)
	case err != nil:
		return storage.User{}, fmt.Errorf("sqlite: set last login of user %q: %w", id, err)
	}
	return got, nil
}

// DeleteUser removes a user without ledger rows, its balance and its keys.
func (s *Store) DeleteUser(ctx context.Context, idOrName string) (err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: delete user: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var id string
	err = tx.QueryRowContext(ctx, `SELECT id FROM users WHERE `+matchIDOrName, idOrName).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlite: user %q: %w", idOrName, storage.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sqlite: delete user %q: %w", idOrName, err)
	}
	var rows int64
	if err = tx.QueryRowContext(ctx, `SELECT count(*) FROM ledger WHERE user_id = ?`, id).Scan(&rows); err != nil {
		return fmt.Errorf("sqlite: delete user %q: %w", idOrName, err)
	}
	if rows > 0 {
		return fmt.Errorf("sqlite: delete user %q: %w: it has %d ledger rows; disable it instead", idOrName, storage.ErrConflict, rows)
	}
	for _, q := range []string{`DELETE FROM api_keys WHERE user_id = ?`, `DELETE FROM balances WHERE user_id = ?`, `DELETE FROM users WHERE id = ?`} {
		if _, err = tx.ExecContext(ctx, q, id); err != nil {
			return fmt.Errorf("sqlite: delete user %q: %w", idOrName, err)
		}
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: delete user %q: commit: %w", idOrName, err)
	}
	return nil
}

// Balance returns the user's cached ledger sum.
func (s *Store) Balance(ctx context.Context, userID string) (int64, error) {
	var b int64
	err := s.r.QueryRowContext(ctx, `SELECT balance FROM balances WHERE user_id = ?`, userID).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("sqlite: balance of %q: %w", userID, storage.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: balance of %q: %w", userID, err)
	}
	return b, nil
}

// Balances returns every user's balance by user ID.
func (s *Store) Balances(ctx context.Context) (map[string]int64, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT user_id, balance FROM balances`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: balances: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			id string
			b  int64
		)
		if err := rows.Scan(&id, &b); err != nil {
			return nil, fmt.Errorf("sqlite: balances: %w", err)
		}
		out[id] = b
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: balances: %w", err)
	}
	return out, nil
}

// PostLedger adds e to the ledger and the user's balance in one transaction.
func (s *Store) PostLedger(ctx context.Context, e storage.LedgerEntry) (_ storage.LedgerEntry, err error) {
	if err := e.Validate(); err != nil {
		return storage.LedgerEntry{}, fmt.Errorf("sqlite: post ledger: %w", err)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return storage.LedgerEntry{}, fmt.Errorf("sqlite: post ledger: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if e, err = postLedger(ctx, tx, e); err != nil {
		return storage.LedgerEntry{}, err
	}
	if err = tx.Commit(); err != nil {
		return storage.LedgerEntry{}, fmt.Errorf("sqlite: post ledger: commit: %w", err)
	}
	return e, nil
}

// postLedger inserts e and adds its amount to the balance, in tx. A user
// without a balance row does not exist (ErrNotFound).
func postLedger(ctx context.Context, tx *sql.Tx, e storage.LedgerEntry) (storage.LedgerEntry, error) {
	e.CreatedAt = now()
	var bal int64
	err := tx.QueryRowContext(ctx, `SELECT balance FROM balances WHERE user_id = ?`, e.UserID).Scan(&bal)
	if errors.Is(err, sql.ErrNoRows) {
		return storage.LedgerEntry{}, fmt.Errorf("sqlite: post ledger: user %q: %w", e.UserID, storage.ErrNotFound)
	}
	if err != nil {
		return storage.LedgerEntry{}, fmt.Errorf("sqlite: post ledger: %w", err)
	}
	next, err := storage.PostBalance(bal, &e)
	if err != nil {
		return storage.LedgerEntry{}, fmt.Errorf("sqlite: post ledger: %w", err)
	}
	if e.Kind == storage.LedgerRefund && e.RequestID != "" {
		var ch storage.LedgerEntry
		err := tx.QueryRowContext(ctx, `SELECT user_id, amount FROM ledger WHERE request_id = ? AND kind = 'charge'`, e.RequestID).Scan(&ch.UserID, &ch.Amount)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return storage.LedgerEntry{}, fmt.Errorf("sqlite: post ledger: %w", err)
		}
		found := &ch
		if err != nil {
			found = nil
		}
		if err := storage.CheckRefund(&e, found); err != nil {
			return storage.LedgerEntry{}, fmt.Errorf("sqlite: post ledger: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE balances SET balance = ?, updated_at = ? WHERE user_id = ?`, next, toMillis(e.CreatedAt), e.UserID); err != nil {
		return storage.LedgerEntry{}, fmt.Errorf("sqlite: post ledger: %w", err)
	}
	err = tx.QueryRowContext(ctx, `INSERT INTO ledger (user_id, kind, amount, actor, note, request_id, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		e.UserID, string(e.Kind), e.Amount, e.Actor, e.Note, e.RequestID, toMillis(e.CreatedAt)).Scan(&e.ID)
	if isConstraint(err) {
		return storage.LedgerEntry{}, conflict(fmt.Sprintf("post ledger: %s of request %q", e.Kind, e.RequestID), err)
	}
	if err != nil {
		return storage.LedgerEntry{}, fmt.Errorf("sqlite: post ledger: %w", err)
	}
	return e, nil
}

// Ledger returns a user's ledger rows, newest first.
func (s *Store) Ledger(ctx context.Context, q storage.LedgerQuery) ([]storage.LedgerEntry, error) {
	before := q.Before
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, user_id, kind, amount, actor, note, request_id, created_at FROM ledger
		WHERE user_id = ? AND id < ? ORDER BY id DESC LIMIT ?`, q.UserID, before, q.PageLimit())
	if err != nil {
		return nil, fmt.Errorf("sqlite: ledger: %w", err)
	}
	defer rows.Close()
	var out []storage.LedgerEntry
	for rows.Next() {
		var (
			e    storage.LedgerEntry
			kind string
			at   int64
		)
		if err := rows.Scan(&e.ID, &e.UserID, &kind, &e.Amount, &e.Actor, &e.Note, &e.RequestID, &at); err != nil {
			return nil, fmt.Errorf("sqlite: ledger: %w", err)
		}
		e.Kind, e.CreatedAt = storage.LedgerKind(kind), fromMillis(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: ledger: %w", err)
	}
	return out, nil
}

// PutPrice inserts or replaces the price of p.Model.
func (s *Store) PutPrice(ctx context.Context, p storage.Price) (storage.Price, error) {
	if err := p.Validate(); err != nil {
		return storage.Price{}, fmt.Errorf("sqlite: put price: %w", err)
	}
	p.UpdatedAt = now()
	_, err := s.w.ExecContext(ctx, `INSERT INTO prices (model, currency, input, cached_input, cache_write, output, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (model) DO UPDATE SET currency = excluded.currency, input = excluded.input, cached_input = excluded.cached_input,
		cache_write = excluded.cache_write, output = excluded.output, updated_at = excluded.updated_at`,
		p.Model, p.Currency, p.Input, p.CachedInput, p.CacheWrite, p.Output, toMillis(p.UpdatedAt))
	if err != nil {
		return storage.Price{}, fmt.Errorf("sqlite: put price %q: %w", p.Model, err)
	}
	return p, nil
}

// ListPrices returns every price ordered by model.
func (s *Store) ListPrices(ctx context.Context) ([]storage.Price, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT model, currency, input, cached_input, cache_write, output, updated_at FROM prices ORDER BY model`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list prices: %w", err)
	}
	defer rows.Close()
	out := []storage.Price{}
	for rows.Next() {
		var (
			p  storage.Price
			at int64
		)
		if err := rows.Scan(&p.Model, &p.Currency, &p.Input, &p.CachedInput, &p.CacheWrite, &p.Output, &at); err != nil {
			return nil, fmt.Errorf("sqlite: list prices: %w", err)
		}
		p.UpdatedAt = fromMillis(at)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list prices: %w", err)
	}
	return out, nil
}

// DeletePrice removes the price of model.
func (s *Store) DeletePrice(ctx context.Context, model string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM prices WHERE model = ?`, model)
	if err != nil {
		return fmt.Errorf("sqlite: delete price %q: %w", model, err)
	}
	return affectedOne(res, "price", model)
}

// PutPriceGroup sets a group's multiplier.
func (s *Store) PutPriceGroup(ctx context.Context, g storage.PriceGroup) error {
	if err := g.Validate(); err != nil {
		return fmt.Errorf("sqlite: put price group: %w", err)
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO price_groups (grp, multiplier) VALUES (?, ?)
		ON CONFLICT (grp) DO UPDATE SET multiplier = excluded.multiplier`, g.Group, g.Multiplier); err != nil {
		return fmt.Errorf("sqlite: put price group %q: %w", g.Group, err)
	}
	return nil
}

// ListPriceGroups returns every group multiplier ordered by group.
func (s *Store) ListPriceGroups(ctx context.Context) ([]storage.PriceGroup, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT grp, multiplier FROM price_groups ORDER BY grp`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list price groups: %w", err)
	}
	defer rows.Close()
	out := []storage.PriceGroup{}
	for rows.Next() {
		var g storage.PriceGroup
		if err := rows.Scan(&g.Group, &g.Multiplier); err != nil {
			return nil, fmt.Errorf("sqlite: list price groups: %w", err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list price groups: %w", err)
	}
	return out, nil
}

// DeletePriceGroup removes a group's multiplier.
func (s *Store) DeletePriceGroup(ctx context.Context, group string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM price_groups WHERE grp = ?`, group)
	if err != nil {
		return fmt.Errorf("sqlite: delete price group %q: %w", group, err)
	}
	return affectedOne(res, "price group", group)
}

const invitationColumns = `id, hash, prefix, note, max_uses, uses, disabled, expires_at, created_by, created_at`

// CreateInvitation stores inv.
func (s *Store) CreateInvitation(ctx context.Context, inv storage.Invitation) (storage.Invitation, error) {
	if err := validInvitation(&inv); err != nil {
		return storage.Invitation{}, fmt.Errorf("sqlite: create invitation: %w", err)
	}
	if inv.ID == "" {
		inv.ID = newID()
	}
	inv.Uses = 0
	inv.CreatedAt = now()
	inv.ExpiresAt = truncMillis(inv.ExpiresAt)
	_, err := s.w.ExecContext(ctx, `INSERT INTO invitations (`+invitationColumns+`) VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?)`,
		inv.ID, inv.Hash, inv.Prefix, inv.Note, inv.MaxUses, boolInt(inv.Disabled), optMillis(inv.ExpiresAt), inv.CreatedBy, toMillis(inv.CreatedAt))
	if isConstraint(err) {
		return storage.Invitation{}, conflict("create invitation", err)
	}
	if err != nil {
		return storage.Invitation{}, fmt.Errorf("sqlite: create invitation: %w", err)
	}
	return inv, nil
}

// validInvitation checks what both backends require of an invitation.
func validInvitation(inv *storage.Invitation) error {
	if len(inv.Hash) != 64 || strings.Trim(inv.Hash, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: invitation hash is not 64 lowercase hex digits", storage.ErrInvalid)
	}
	if inv.MaxUses < 1 {
		return fmt.Errorf("%w: invitation max uses %d, at least 1", storage.ErrInvalid, inv.MaxUses)
	}
	if !storage.TextOK(inv.ID, inv.Prefix, inv.Note, inv.CreatedBy) {
		return fmt.Errorf("%w: invitation text that is not valid UTF-8", storage.ErrInvalid)
	}
	return nil
}

// ListInvitations returns every invitation, newest first.
func (s *Store) ListInvitations(ctx context.Context) ([]storage.Invitation, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+invitationColumns+` FROM invitations ORDER BY created_at DESC, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list invitations: %w", err)
	}
	defer rows.Close()
	out := []storage.Invitation{}
	for rows.Next() {
		var (
			inv      storage.Invitation
			disabled int
			expires  sql.NullInt64
			created  int64
		)
		if err := rows.Scan(&inv.ID, &inv.Hash, &inv.Prefix, &inv.Note, &inv.MaxUses, &inv.Uses, &disabled, &expires, &inv.CreatedBy, &created); err != nil {
			return nil, fmt.Errorf("sqlite: list invitations: %w", err)
		}
		inv.Disabled, inv.CreatedAt = disabled != 0, fromMillis(created)
		if expires.Valid {
			t := fromMillis(expires.Int64)
			inv.ExpiresAt = &t
		}
		out = append(out, inv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list invitations: %w", err)
	}
	return out, nil
}

// DisableInvitation marks an invitation disabled.
func (s *Store) DisableInvitation(ctx context.Context, id string) error {
	res, err := s.w.ExecContext(ctx, `UPDATE invitations SET disabled = 1 WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("sqlite: disable invitation %q: %w", id, err)
	}
	return affectedOne(res, "invitation", id)
}

const dayMs = int64(24 * time.Hour / time.Millisecond)

// UserDaily returns the daily rollup rows matching q.
func (s *Store) UserDaily(ctx context.Context, q storage.UserDailyQuery) ([]storage.UserDaily, error) {
	var (
		where []string
		args  []any
	)
	if !q.From.IsZero() {
		where, args = append(where, "day >= ?"), append(args, toMillis(q.From))
	}
	if !q.To.IsZero() {
		where, args = append(where, "day < ?"), append(args, toMillis(q.To))
	}
	if q.UserID != "" {
		where, args = append(where, "user_id = ?"), append(args, q.UserID)
	}
	if q.Model != "" {
		where, args = append(where, "model = ?"), append(args, storage.CleanText(q.Model))
	}
	query := `SELECT day, user_id, model, requests, input_tokens, cached_tokens, output_tokens, cost FROM usage_daily_users`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := s.r.QueryContext(ctx, query+" ORDER BY day, user_id, model", args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: user daily: %w", err)
	}
	defer rows.Close()
	var out []storage.UserDaily
	for rows.Next() {
		var (
			d   storage.UserDaily
			day int64
		)
		if err := rows.Scan(&day, &d.UserID, &d.Model, &d.Requests, &d.InputTokens, &d.CachedTokens, &d.OutputTokens, &d.Cost); err != nil {
			return nil, fmt.Errorf("sqlite: user daily: %w", err)
		}
		d.Day = fromMillis(day)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: user daily: %w", err)
	}
	return out, nil
}

// insertChargesSQL stores n records' charge rows, each bound as user,
// amount (< 0), request id, created_at, and returns the user and amount of
// each row stored. A charge row already there (posted by hand for that
// request) is kept and not doubled, and not returned: a batch must never
// fail on it.
func insertChargesSQL(n int) string {
	return valuesSQL(`INSERT INTO ledger (user_id, kind, amount, actor, note, request_id, created_at) VALUES `,
		`(?,'charge',?,'gateway','',?,?)`, n, `
ON CONFLICT DO NOTHING RETURNING user_id, amount`)
}

// userCharge is what one stored usage record adds to its user's billing.
type userCharge struct {
	requestID, userID, model string
	at                       int64
	input, cached, output    int64
	cost                     int64
}

// The statements that bill a batch's records (usageStmts.charge), prepared
// once on the writer's connection with InsertUsage's.
const (
	// userExistsSQL finds a user's balance row.
	userExistsSQL = `SELECT 1 FROM balances WHERE user_id = ?`
	// chargeBalanceSQL takes a sum of charges (> 0) off a balance, bound as
	// MinInt64 + sum, sum, updated_at, user: max(balance, MinInt64 + sum) −
	// sum saturates at the int64 limit (SQLite would store an overflowing
	// sum as a REAL). Taking a sum at once leaves what taking its charges
	// one by one would: each step is b ↦ max(b − c, MinInt64), and two
	// steps make max(b − c1 − c2, MinInt64 − c2, MinInt64), the same.
	chargeBalanceSQL = `UPDATE balances SET balance = max(balance, ?) - ?, updated_at = ? WHERE user_id = ?`
	// addUserDailySQL adds a group's sums to its usage_daily_users row.
	addUserDailySQL = `INSERT INTO usage_daily_users (day, user_id, model, requests, input_tokens, cached_tokens, output_tokens, cost)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (day, user_id, model) DO UPDATE SET requests = requests + excluded.requests, input_tokens = input_tokens + excluded.input_tokens,
cached_tokens = cached_tokens + excluded.cached_tokens, output_tokens = output_tokens + excluded.output_tokens, cost = cost + excluded.cost`
)

// dailyKey identifies a usage_daily_users row; day in unix ms.
type dailyKey struct {
	day           int64
	userID, model string
}

// dailyRow is a usage_daily_users row's key and the sums a batch adds to
// it; cost in micro-units.
type dailyRow struct {
	key                                   dailyKey
	requests, input, cached, output, cost int64
}

// userTotal is what a batch's charge rows took off one user's balance, in
// micro-units, > 0.
type userTotal struct {
	userID string
	cost   int64
}

// billing is the state of one batch's charges (usageStmts.charge), its
// memory kept from batch to batch.
type billing struct {
	exists map[string]bool  // whether a user of the batch has a balance row
	total  map[string]int   // a user's entry in totals
	totals []userTotal      // the balances' changes, in the order first met
	daily  map[dailyKey]int // a row's entry in rows
	rows   []dailyRow       // the daily rollups' sums, in the order first met
	// charged indexes the charges that cost anything, of users that exist.
	charged []int
}

// reset empties b for a new batch.
func (b *billing) reset() {
	if b.exists == nil {
		b.exists, b.total, b.daily = make(map[string]bool, 16), make(map[string]int, 16), make(map[dailyKey]int, 64)
	}
	clear(b.exists)
	clear(b.total)
	clear(b.daily)
	b.totals, b.rows, b.charged = b.totals[:0], b.rows[:0], b.charged[:0]
}

// charge bills the records InsertUsage stored in its transaction: for each
// one of a user that still exists, a charge row (when it cost anything;
// in multi-row statements, insertCharges), then, once a batch, each user's
// balance less the sum of its charge rows the batch stored, and each (day,
// user, model)'s daily rollup plus its records' sums. The state left is
// what a record at a time leaves (the balance's saturation:
// chargeBalanceSQL); the statements are prepared once (usageStmts), and a
// batch runs one UPDATE a user and one upsert a daily row instead of one
// of each a record. A sum that would overflow int64 starts a new entry,
// written after the first.
func (us *usageStmts) charge(ctx context.Context, charges []userCharge) error {
	if len(charges) == 0 {
		return nil
	}
	b := &us.bill
	b.reset()
	at := toMillis(now())
	for i := range charges {
		c := &charges[i]
		exists, ok := b.exists[c.userID]
		if !ok {
			var err error
			if exists, err = us.userExists(ctx, c.userID); err != nil {
				return err
			}
			b.exists[c.userID] = exists
		}
		if !exists {
			continue // a user deleted meanwhile: the record stays, unbilled
		}
		if c.cost > 0 {
			b.charged = append(b.charged, i)
		}
		day := c.at - c.at%dayMs
		if c.at%dayMs < 0 {
			day -= dayMs
		}
		k := dailyKey{day: day, userID: c.userID, model: c.model}
		j, ok := b.daily[k]
		if ok {
			r := &b.rows[j]
			ok = r.cost <= math.MaxInt64-c.cost && r.input <= math.MaxInt64-c.input &&
				r.cached <= math.MaxInt64-c.cached && r.output <= math.MaxInt64-c.output
		}
		if !ok {
			j = len(b.rows)
			b.rows = append(b.rows, dailyRow{key: k})
			b.daily[k] = j
		}
		r := &b.rows[j]
		r.requests++
		r.input += c.input
		r.cached += c.cached
		r.output += c.output
		r.cost += c.cost
	}
	if err := us.insertCharges(ctx, charges, at); err != nil {
		return err
	}
	for _, t := range b.totals {
		us.args = append(us.args[:0],
			driver.NamedValue{Ordinal: 1, Value: math.MinInt64 + t.cost}, driver.NamedValue{Ordinal: 2, Value: t.cost},
			driver.NamedValue{Ordinal: 3, Value: at}, driver.NamedValue{Ordinal: 4, Value: t.userID})
		if _, err := us.exec(ctx, us.balance); err != nil {
			return fmt.Errorf("sqlite: insert usage: charge: %w", err)
		}
	}
	for _, r := range b.rows {
		us.args = append(us.args[:0],
			driver.NamedValue{Ordinal: 1, Value: r.key.day}, driver.NamedValue{Ordinal: 2, Value: r.key.userID},
			driver.NamedValue{Ordinal: 3, Value: r.key.model}, driver.NamedValue{Ordinal: 4, Value: r.requests},
			driver.NamedValue{Ordinal: 5, Value: r.input}, driver.NamedValue{Ordinal: 6, Value: r.cached},
			driver.NamedValue{Ordinal: 7, Value: r.output}, driver.NamedValue{Ordinal: 8, Value: r.cost})
		if _, err := us.exec(ctx, us.daily); err != nil {
			return fmt.Errorf("sqlite: insert usage: daily rollup: %w", err)
		}
	}
	return nil
}

// insertCharges stores the charge rows of the records us.bill.charged
// indexes in charges, created at at, in statements of power-of-two sizes,
// largest first (usageRowsShift), and adds the amount of each row stored
// to its user's entry in us.bill.totals.
func (us *usageStmts) insertCharges(ctx context.Context, charges []userCharge, at int64) error {
	b := &us.bill
	atv := driver.Value(at)
	for start := 0; start < len(b.charged); {
		k := bits.Len(uint(min(len(b.charged)-start, 1<<usageRowsShift))) - 1
		us.args = us.args[:0]
		for _, i := range b.charged[start : start+1<<k] {
			c := &charges[i]
			n := len(us.args)
			us.args = append(us.args,
				driver.NamedValue{Ordinal: n + 1, Value: c.userID}, driver.NamedValue{Ordinal: n + 2, Value: -c.cost},
				driver.NamedValue{Ordinal: n + 3, Value: c.requestID}, driver.NamedValue{Ordinal: n + 4, Value: atv})
		}
		rows, err := us.ledger[k].QueryContext(context.WithoutCancel(ctx), us.args)
		if err != nil {
			return fmt.Errorf("sqlite: insert usage: charge: %w", err)
		}
		for {
			if err = rows.Next(us.row[:]); err != nil {
				break
			}
			user, ok1 := us.row[0].(string)
			amount, ok2 := us.row[1].(int64)
			if !ok1 || !ok2 || amount >= 0 {
				err = fmt.Errorf("a charge row returned as %T %T (%v)", us.row[0], us.row[1], us.row[1])
				break
			}
			b.add(user, -amount)
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
		if cerr := rows.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("sqlite: insert usage: charge: %w", err)
		}
		start += 1 << k
	}
	return nil
}

// add adds cost (> 0), a charge row stored, to user's entry in b.totals,
// starting a new entry when the sum would overflow int64.
func (b *billing) add(user string, cost int64) {
	j, ok := b.total[user]
	if !ok || b.totals[j].cost > math.MaxInt64-cost {
		j = len(b.totals)
		b.totals = append(b.totals, userTotal{userID: user})
		b.total[user] = j
	}
	b.totals[j].cost += cost
}

// userExists reports whether user id has a balance row (userExistsSQL).
func (us *usageStmts) userExists(ctx context.Context, id string) (bool, error) {
	us.args = append(us.args[:0], driver.NamedValue{Ordinal: 1, Value: id})
	rows, err := us.exists.QueryContext(context.WithoutCancel(ctx), us.args)
	if err != nil {
		return false, fmt.Errorf("sqlite: insert usage: charge: %w", err)
	}
	err = rows.Next(us.dest[:])
	found := err == nil
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("sqlite: insert usage: charge: %w", err)
	}
	return found, nil
}

func scanUser(r rowScanner) (storage.User, error) {
	var (
		u                storage.User
		disabled         int
		models           string
		created, updated int64
		lastLogin        sql.NullInt64
	)
	if err := r.Scan(&u.ID, &u.Name, &u.Email, &u.PasswordHash, &u.Group, &disabled, &models, &u.RPM, &u.MaxConcurrency,
		&created, &updated, &lastLogin); err != nil {
		return storage.User{}, err
	}
	var err error
	if u.Models, err = decodeList(models); err != nil {
		return storage.User{}, fmt.Errorf("user %q: models: %w", u.Name, err)
	}
	u.Disabled = disabled != 0
	u.CreatedAt, u.UpdatedAt = fromMillis(created), fromMillis(updated)
	if lastLogin.Valid {
		t := fromMillis(lastLogin.Int64)
		u.LastLoginAt = &t
	}
	return u, nil
}

// nullString stores "" as NULL.
func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// isForeignKey reports whether err is a FOREIGN KEY violation.
func isForeignKey(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}

// PruneUserDaily deletes the daily rollup rows of days before before, in
// batches of pruneBatch rows, each its own transaction (as PruneUsage).
func (s *Store) PruneUserDaily(ctx context.Context, before time.Time) (int64, error) {
	if before.IsZero() {
		return 0, nil
	}
	n, err := s.pruneLoop(ctx, `DELETE FROM usage_daily_users WHERE rowid IN (
		SELECT rowid FROM usage_daily_users WHERE day < ? LIMIT `+fmt.Sprint(pruneBatch)+`)`, toMillis(before))
	if err != nil {
		return n, fmt.Errorf("sqlite: prune daily user rollups: %w", err)
	}
	return n, nil
}

// ifMillis is a conditional write's expected time in unix milliseconds, 0
// for none.
func ifMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return toMillis(t)
}
