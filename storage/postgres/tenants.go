package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/troupe-gw/troupe/storage"
)

const userColumns = `id, name, email, password_hash, grp, disabled, models, rpm, max_concurrency, created_at, updated_at, last_login_at`

// CreateUser stores u with a balance of 0, redeems n.Invitation and credits
// n.Balance in one transaction (see storage.Users).
func (s *Store) CreateUser(ctx context.Context, u storage.User, n storage.NewUser) (storage.User, error) {
	if err := u.Validate(); err != nil {
		return storage.User{}, fmt.Errorf("postgres: create user: %w", err)
	}
	if n.Balance < 0 {
		return storage.User{}, fmt.Errorf("postgres: create user %q: %w: negative starting balance", u.Name, storage.ErrInvalid)
	}
	if u.ID == "" {
		u.ID = newID()
	}
	u.CreatedAt = now()
	u.UpdatedAt = u.CreatedAt
	u.LastLoginAt = optMs(u.LastLoginAt)
	u.Models = normList(u.Models)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if n.Invitation != "" {
			tag, err := tx.Exec(ctx, `UPDATE invitations SET uses = uses + 1
				WHERE hash = $1 AND NOT disabled AND uses < max_uses AND (expires_at IS NULL OR expires_at > $2)`, n.Invitation, u.CreatedAt)
			if err != nil {
				return wrap(fmt.Sprintf("create user %q: redeem invitation", u.Name), err)
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("postgres: create user %q: %w: the invitation code is unknown, used up, disabled or expired", u.Name, storage.ErrInvalid)
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO users (`+userColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
			u.ID, u.Name, u.Email, u.PasswordHash, u.Group, u.Disabled, list(u.Models), u.RPM, u.MaxConcurrency, u.CreatedAt, u.UpdatedAt, u.LastLoginAt)
		if uniqueViolation(err) {
			return conflict(fmt.Sprintf("create user %q", u.Name), err)
		}
		if err != nil {
			return wrap(fmt.Sprintf("create user %q", u.Name), err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO balances (user_id, balance, updated_at) VALUES ($1, 0, $2)`, u.ID, u.CreatedAt); err != nil {
			return wrap(fmt.Sprintf("create user %q: balance", u.Name), err)
		}
		if n.Balance > 0 {
			_, err := postLedger(ctx, tx, storage.LedgerEntry{UserID: u.ID, Kind: storage.LedgerTopup, Amount: n.Balance, Actor: n.Actor, Note: n.Note})
			return err
		}
		return nil
	})
	if err != nil {
		return storage.User{}, err
	}
	return u, nil
}

// GetUser returns the user whose ID, else Name, else Email is idNameOrEmail.
func (s *Store) GetUser(ctx context.Context, idNameOrEmail string) (storage.User, error) {
	if idNameOrEmail == "" || !storage.TextOK(idNameOrEmail) {
		return storage.User{}, fmt.Errorf("postgres: user %q: %w", idNameOrEmail, storage.ErrNotFound)
	}
	u, err := scanUser(s.pool.QueryRow(ctx, `SELECT `+userColumns+` FROM users
		WHERE id = $1 OR name = $1 OR email = $1 ORDER BY id = $1 DESC, name = $1 DESC LIMIT 1`, idNameOrEmail))
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.User{}, fmt.Errorf("postgres: user %q: %w", idNameOrEmail, storage.ErrNotFound)
	}
	if err != nil {
		return storage.User{}, fmt.Errorf("postgres: get user %q: %w", idNameOrEmail, err)
	}
	return u, nil
}

// ListUsers returns every user ordered by name (bytewise).
func (s *Store) ListUsers(ctx context.Context) ([]storage.User, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+userColumns+` FROM users ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list users: %w", err)
	}
	defer rows.Close()
	out := []storage.User{}
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: list users: %w", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list users: %w", err)
	}
	return out, nil
}

// UpdateUser replaces the mutable fields of the user with u.ID.
func (s *Store) UpdateUser(ctx context.Context, u storage.User) (storage.User, error) {
	if err := u.Validate(); err != nil {
		return storage.User{}, fmt.Errorf("postgres: update user: %w", err)
	}
	got, err := scanUser(s.pool.QueryRow(ctx, `UPDATE users SET name = $1, email = $2, password_hash = $3, grp = $4, disabled = $5,
		models = $6, rpm = $7, max_concurrency = $8, last_login_at = $9, updated_at = greatest(updated_at + interval '1 millisecond', $10)
		WHERE id = $11 AND ($12::timestamptz IS NULL OR updated_at = $12) RETURNING `+userColumns,
		u.Name, u.Email, u.PasswordHash, u.Group, u.Disabled, list(u.Models), u.RPM, u.MaxConcurrency, optMs(u.LastLoginAt), now(), u.ID, ifMs(u.IfUpdatedAt)))
	switch {
	case errors.Is(err, pgx.ErrNoRows) && !u.IfUpdatedAt.IsZero():
		if _, gerr := s.GetUser(ctx, u.ID); gerr == nil {
			return storage.User{}, fmt.Errorf("postgres: update user %q: %w", u.ID, storage.ErrStale)
		}
		return storage.User{}, fmt.Errorf("postgres: user %q: %w", u.ID, storage.ErrNotFound)
	case errors.Is(err, pgx.ErrNoRows):
		return storage.User{}, fmt.Errorf("postgres: user %q: %w", u.ID, storage.ErrNotFound)
	case uniqueViolation(err):
		return storage.User{}, conflict(fmt.Sprintf("update user %q", u.ID), err)
	case err != nil:
		return storage.User{}, wrap(fmt.Sprintf("update user %q", u.ID), err)
	}
	return got, nil
}

// SetUserLastLogin sets only last_login_at of the user with ID id; its
// updated_at (the version admins edit against) stays.
func (s *Store) SetUserLastLogin(ctx context.Context, id string, at time.Time) (storage.User, error) {
	at = at.UTC().Truncate(time.Millisecond)
	got, err := scanUser(s.pool.QueryRow(ctx, `UPDATE users SET last_login_at = $1 WHERE id = $2 RETURNING `+userColumns, at, id))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return storage.User{}, fmt.Errorf("postgres: user %q: %w", id, storage.ErrNotFound)
	case err != nil:
		return storage.User{}, wrap(fmt.Sprintf("set last login of user %q", id), err)
	}
	return got, nil
}

// DeleteUser removes a user without ledger rows, its balance and its keys.
func (s *Store) DeleteUser(ctx context.Context, idOrName string) error {
	if !storage.TextOK(idOrName) {
		return fmt.Errorf("postgres: user %q: %w", idOrName, storage.ErrNotFound)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var id string
		err := tx.QueryRow(ctx, `SELECT id FROM users WHERE `+matchIDOrName+` FOR UPDATE`, idOrName).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("postgres: user %q: %w", idOrName, storage.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("postgres: delete user %q: %w", idOrName, err)
		}
		// Lock the balance: a usage batch charging the user waits, then
		// finds no balance and leaves its records unbilled.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM balances WHERE user_id = $1 FOR UPDATE`, id); err != nil {
			return fmt.Errorf("postgres: delete user %q: %w", idOrName, err)
		}
		var rows int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE user_id = $1`, id).Scan(&rows); err != nil {
			return fmt.Errorf("postgres: delete user %q: %w", idOrName, err)
		}
		if rows > 0 {
			return fmt.Errorf("postgres: delete user %q: %w: it has %d ledger rows; disable it instead", idOrName, storage.ErrConflict, rows)
		}
		for _, q := range []string{`DELETE FROM api_keys WHERE user_id = $1`, `DELETE FROM balances WHERE user_id = $1`, `DELETE FROM users WHERE id = $1`} {
			if _, err := tx.Exec(ctx, q, id); err != nil {
				return fmt.Errorf("postgres: delete user %q: %w", idOrName, err)
			}
		}
		return nil
	})
}

// Balance returns the user's cached ledger sum.
func (s *Store) Balance(ctx context.Context, userID string) (int64, error) {
	if !storage.TextOK(userID) {
		return 0, fmt.Errorf("postgres: balance of %q: %w", userID, storage.ErrNotFound)
	}
	var b int64
	err := s.pool.QueryRow(ctx, `SELECT balance FROM balances WHERE user_id = $1`, userID).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("postgres: balance of %q: %w", userID, storage.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: balance of %q: %w", userID, err)
	}
	return b, nil
}

// Balances returns every user's balance by user ID.
func (s *Store) Balances(ctx context.Context) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT user_id, balance FROM balances`)
	if err != nil {
		return nil, fmt.Errorf("postgres: balances: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			id string
			b  int64
		)
		if err := rows.Scan(&id, &b); err != nil {
			return nil, fmt.Errorf("postgres: balances: %w", err)
		}
		out[id] = b
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: balances: %w", err)
	}
	return out, nil
}

// PostLedger adds e to the ledger and the user's balance in one transaction.
func (s *Store) PostLedger(ctx context.Context, e storage.LedgerEntry) (storage.LedgerEntry, error) {
	if err := e.Validate(); err != nil {
		return storage.LedgerEntry{}, fmt.Errorf("postgres: post ledger: %w", err)
	}
	var out storage.LedgerEntry
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = postLedger(ctx, tx, e)
		return err
	})
	if err != nil {
		return storage.LedgerEntry{}, err
	}
	return out, nil
}

// postLedger adds e's amount to the balance (locking its row, so that
// concurrent posts serialize) and inserts e, in tx. A user without a
// balance row does not exist (ErrNotFound).
func postLedger(ctx context.Context, tx pgx.Tx, e storage.LedgerEntry) (storage.LedgerEntry, error) {
	e.CreatedAt = now()
	var bal int64
	err := tx.QueryRow(ctx, `SELECT balance FROM balances WHERE user_id = $1 FOR NO KEY UPDATE`, e.UserID).Scan(&bal)
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.LedgerEntry{}, fmt.Errorf("postgres: post ledger: user %q: %w", e.UserID, storage.ErrNotFound)
	}
	if err != nil {
		return storage.LedgerEntry{}, wrap("post ledger", err)
	}
	next, err := storage.PostBalance(bal, &e)
	if err != nil {
		return storage.LedgerEntry{}, fmt.Errorf("postgres: post ledger: %w", err)
	}
	if e.Kind == storage.LedgerRefund && e.RequestID != "" {
		var ch storage.LedgerEntry
		err := tx.QueryRow(ctx, `SELECT user_id, amount FROM ledger WHERE request_id = $1 AND kind = 'charge'`, e.RequestID).Scan(&ch.UserID, &ch.Amount)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return storage.LedgerEntry{}, wrap("post ledger", err)
		}
		found := &ch
		if err != nil {
			found = nil
		}
		if err := storage.CheckRefund(&e, found); err != nil {
			return storage.LedgerEntry{}, fmt.Errorf("postgres: post ledger: %w", err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE balances SET balance = $1, updated_at = $2 WHERE user_id = $3`, next, e.CreatedAt, e.UserID); err != nil {
		return storage.LedgerEntry{}, wrap("post ledger", err)
	}
	err = tx.QueryRow(ctx, `INSERT INTO ledger (user_id, kind, amount, actor, note, request_id, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`,
		e.UserID, string(e.Kind), e.Amount, e.Actor, e.Note, e.RequestID, e.CreatedAt).Scan(&e.ID)
	if uniqueViolation(err) {
		return storage.LedgerEntry{}, conflict(fmt.Sprintf("post ledger: %s of request %q", e.Kind, e.RequestID), err)
	}
	if err != nil {
		return storage.LedgerEntry{}, wrap("post ledger", err)
	}
	return e, nil
}

// Ledger returns a user's ledger rows, newest first.
func (s *Store) Ledger(ctx context.Context, q storage.LedgerQuery) ([]storage.LedgerEntry, error) {
	if !storage.TextOK(q.UserID) {
		return nil, nil
	}
	before := q.Before
	if before <= 0 {
		before = 1<<63 - 1
	}
	rows, err := s.pool.Query(ctx, `SELECT id, user_id, kind, amount, actor, note, request_id, created_at FROM ledger
		WHERE user_id = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, q.UserID, before, q.PageLimit())
	if err != nil {
		return nil, fmt.Errorf("postgres: ledger: %w", err)
	}
	defer rows.Close()
	var out []storage.LedgerEntry
	for rows.Next() {
		var (
			e    storage.LedgerEntry
			kind string
		)
		if err := rows.Scan(&e.ID, &e.UserID, &kind, &e.Amount, &e.Actor, &e.Note, &e.RequestID, &e.CreatedAt); err != nil {
			return nil, fmt.Errorf("postgres: ledger: %w", err)
		}
		e.Kind, e.CreatedAt = storage.LedgerKind(kind), e.CreatedAt.UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: ledger: %w", err)
	}
	return out, nil
}

// PutPrice inserts or replaces the price of p.Model.
func (s *Store) PutPrice(ctx context.Context, p storage.Price) (storage.Price, error) {
	if err := p.Validate(); err != nil {
		return storage.Price{}, fmt.Errorf("postgres: put price: %w", err)
	}
	p.UpdatedAt = now()
	_, err := s.pool.Exec(ctx, `INSERT INTO prices (model, currency, input, cached_input, cache_write, output, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (model) DO UPDATE SET currency = excluded.currency, input = excluded.input, cached_input = excluded.cached_input,
		cache_write = excluded.cache_write, output = excluded.output, updated_at = excluded.updated_at`,
		p.Model, p.Currency, p.Input, p.CachedInput, p.CacheWrite, p.Output, p.UpdatedAt)
	if err != nil {
		return storage.Price{}, wrap(fmt.Sprintf("put price %q", p.Model), err)
	}
	return p, nil
}

// ListPrices returns every price ordered by model.
func (s *Store) ListPrices(ctx context.Context) ([]storage.Price, error) {
	rows, err := s.pool.Query(ctx, `SELECT model, currency, input, cached_input, cache_write, output, updated_at FROM prices ORDER BY model`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list prices: %w", err)
	}
	defer rows.Close()
	out := []storage.Price{}
	for rows.Next() {
		var p storage.Price
		if err := rows.Scan(&p.Model, &p.Currency, &p.Input, &p.CachedInput, &p.CacheWrite, &p.Output, &p.UpdatedAt); err != nil {
			return nil, fmt.Errorf("postgres: list prices: %w", err)
		}
		p.UpdatedAt = p.UpdatedAt.UTC()
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list prices: %w", err)
	}
	return out, nil
}

// DeletePrice removes the price of model.
func (s *Store) DeletePrice(ctx context.Context, model string) error {
	if !storage.TextOK(model) {
		return fmt.Errorf("postgres: price %q: %w", model, storage.ErrNotFound)
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM prices WHERE model = $1`, model)
	if err != nil {
		return wrap(fmt.Sprintf("delete price %q", model), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: price %q: %w", model, storage.ErrNotFound)
	}
	return nil
}

// PutPriceGroup sets a group's multiplier.
func (s *Store) PutPriceGroup(ctx context.Context, g storage.PriceGroup) error {
	if err := g.Validate(); err != nil {
		return fmt.Errorf("postgres: put price group: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO price_groups (grp, multiplier) VALUES ($1, $2)
		ON CONFLICT (grp) DO UPDATE SET multiplier = excluded.multiplier`, g.Group, g.Multiplier); err != nil {
		return wrap(fmt.Sprintf("put price group %q", g.Group), err)
	}
	return nil
}

// ListPriceGroups returns every group multiplier ordered by group.
func (s *Store) ListPriceGroups(ctx context.Context) ([]storage.PriceGroup, error) {
	rows, err := s.pool.Query(ctx, `SELECT grp, multiplier FROM price_groups ORDER BY grp`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list price groups: %w", err)
	}
	defer rows.Close()
	out := []storage.PriceGroup{}
	for rows.Next() {
		var g storage.PriceGroup
		if err := rows.Scan(&g.Group, &g.Multiplier); err != nil {
			return nil, fmt.Errorf("postgres: list price groups: %w", err)
		}
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list price groups: %w", err)
	}
	return out, nil
}

// DeletePriceGroup removes a group's multiplier.
func (s *Store) DeletePriceGroup(ctx context.Context, group string) error {
	if !storage.TextOK(group) {
		return fmt.Errorf("postgres: price group %q: %w", group, storage.ErrNotFound)
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM price_groups WHERE grp = $1`, group)
	if err != nil {
		return wrap(fmt.Sprintf("delete price group %q", group), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: price group %q: %w", group, storage.ErrNotFound)
	}
	return nil
}

const invitationColumns = `id, hash, prefix, note, max_uses, uses, disabled, expires_at, created_by, created_at`

// CreateInvitation stores inv.
func (s *Store) CreateInvitation(ctx context.Context, inv storage.Invitation) (storage.Invitation, error) {
	if len(inv.Hash) != 64 || strings.Trim(inv.Hash, "0123456789abcdef") != "" {
		return storage.Invitation{}, fmt.Errorf("postgres: create invitation: %w: hash is not 64 lowercase hex digits", storage.ErrInvalid)
	}
	if inv.MaxUses < 1 {
		return storage.Invitation{}, fmt.Errorf("postgres: create invitation: %w: max uses %d, at least 1", storage.ErrInvalid, inv.MaxUses)
	}
	if !storage.TextOK(inv.ID, inv.Prefix, inv.Note, inv.CreatedBy) {
		return storage.Invitation{}, fmt.Errorf("postgres: create invitation: %w: text that is not valid UTF-8", storage.ErrInvalid)
	}
	if inv.ID == "" {
		inv.ID = newID()
	}
	inv.Uses = 0
	inv.CreatedAt = now()
	inv.ExpiresAt = optMs(inv.ExpiresAt)
	_, err := s.pool.Exec(ctx, `INSERT INTO invitations (`+invitationColumns+`) VALUES ($1, $2, $3, $4, $5, 0, $6, $7, $8, $9)`,
		inv.ID, inv.Hash, inv.Prefix, inv.Note, inv.MaxUses, inv.Disabled, inv.ExpiresAt, inv.CreatedBy, inv.CreatedAt)
	if uniqueViolation(err) {
		return storage.Invitation{}, conflict("create invitation", err)
	}
	if err != nil {
		return storage.Invitation{}, wrap("create invitation", err)
	}
	return inv, nil
}

// ListInvitations returns every invitation, newest first.
func (s *Store) ListInvitations(ctx context.Context) ([]storage.Invitation, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+invitationColumns+` FROM invitations ORDER BY created_at DESC, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list invitations: %w", err)
	}
	defer rows.Close()
	out := []storage.Invitation{}
	for rows.Next() {
		var (
			inv     storage.Invitation
			expires *time.Time
		)
		if err := rows.Scan(&inv.ID, &inv.Hash, &inv.Prefix, &inv.Note, &inv.MaxUses, &inv.Uses, &inv.Disabled, &expires, &inv.CreatedBy, &inv.CreatedAt); err != nil {
			return nil, fmt.Errorf("postgres: list invitations: %w", err)
		}
		inv.CreatedAt = inv.CreatedAt.UTC()
		if expires != nil {
			t := expires.UTC()
			inv.ExpiresAt = &t
		}
		out = append(out, inv)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list invitations: %w", err)
	}
	return out, nil
}

// DisableInvitation marks an invitation disabled.
func (s *Store) DisableInvitation(ctx context.Context, id string) error {
	if !storage.TextOK(id) {
		return fmt.Errorf("postgres: invitation %q: %w", id, storage.ErrNotFound)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE invitations SET disabled = true WHERE id = $1`, id)
	if err != nil {
		return wrap(fmt.Sprintf("disable invitation %q", id), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: invitation %q: %w", id, storage.ErrNotFound)
	}
	return nil
}

// UserDaily returns the daily rollup rows matching q.
func (s *Store) UserDaily(ctx context.Context, q storage.UserDailyQuery) ([]storage.UserDaily, error) {
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	// A row's time is the start of its UTC day, as in the SQLite backend.
	if !q.From.IsZero() {
		add("(day::timestamp AT TIME ZONE 'UTC') >= $%d", q.From)
	}
	if !q.To.IsZero() {
		add("(day::timestamp AT TIME ZONE 'UTC') < $%d", q.To)
	}
	if q.UserID != "" {
		add("user_id = $%d", storage.CleanText(q.UserID))
	}
	if q.Model != "" {
		add("model = $%d", storage.CleanText(q.Model))
	}
	query := `SELECT day::timestamp AT TIME ZONE 'UTC', user_id, model, requests, input_tokens, cached_tokens, output_tokens, cost FROM usage_daily_users`
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	rows, err := s.pool.Query(ctx, query+" ORDER BY day, user_id, model", args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: user daily: %w", err)
	}
	defer rows.Close()
	var out []storage.UserDaily
	for rows.Next() {
		var d storage.UserDaily
		if err := rows.Scan(&d.Day, &d.UserID, &d.Model, &d.Requests, &d.InputTokens, &d.CachedTokens, &d.OutputTokens, &d.Cost); err != nil {
			return nil, fmt.Errorf("postgres: user daily: %w", err)
		}
		d.Day = d.Day.UTC()
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: user daily: %w", err)
	}
	return out, nil
}

func scanUser(row pgx.Row) (storage.User, error) {
	var (
		u         storage.User
		models    []string
		lastLogin *time.Time
	)
	if err := row.Scan(&u.ID, &u.Name, &u.Email, &u.PasswordHash, &u.Group, &u.Disabled, &models, &u.RPM, &u.MaxConcurrency,
		&u.CreatedAt, &u.UpdatedAt, &lastLogin); err != nil {
		return storage.User{}, err
	}
	u.Models = normList(models)
	u.CreatedAt, u.UpdatedAt = u.CreatedAt.UTC(), u.UpdatedAt.UTC()
	if lastLogin != nil {
		t := lastLogin.UTC()
		u.LastLoginAt = &t
	}
	return u, nil
}

// optString stores "" as NULL.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// PruneUserDaily deletes the daily rollup rows of days before before (a
// row's time is the start of its UTC day, as in UserDaily), in batches of
// pruneBatch rows by primary key, each its own transaction (as PruneUsage).
func (s *Store) PruneUserDaily(ctx context.Context, before time.Time) (int64, error) {
	if before.IsZero() {
		return 0, nil
	}
	n, err := s.pruneLoop(ctx, `DELETE FROM usage_daily_users WHERE (day, user_id, model) IN (
		SELECT day, user_id, model FROM usage_daily_users WHERE (day::timestamp AT TIME ZONE 'UTC') < $1 LIMIT `+fmt.Sprint(pruneBatch)+`)`, before)
	if err != nil {
		return n, fmt.Errorf("postgres: prune daily user rollups: %w", err)
	}
	return n, nil
}

// ifMs is a conditional write's expected time at the stored precision,
// nil for none.
func ifMs(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	v := ms(t)
	return &v
}
