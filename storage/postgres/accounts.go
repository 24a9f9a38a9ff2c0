package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/troupe-gw/troupe/storage"
)

const accountColumns = `id, name, provider, base_url, credentials, models, max_concurrency, grp, tags, priority, disabled, created_at, updated_at, version`

// matchIDOrName selects at most one row of a table with id and name columns
// for the parameter $1, preferring an id match over a name match (an account
// could be named like another one's id).
const matchIDOrName = `(id = $1 OR name = $1) ORDER BY id = $1 DESC LIMIT 1`

// putAccountSQL inserts an account or, when the name exists, updates it in
// place keeping id and created_at. updated_at grows by at least 1 ms on every
// update (even within one millisecond, or if the clock steps back), so that
// readers can detect changes by comparing it; version ($14) is the change
// feed's. The WHERE refuses the update when the caller named an id ($15)
// that is not the existing row's; RETURNING then yields no row.
const putAccountSQL = `INSERT INTO accounts (` + accountColumns + `)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
ON CONFLICT (name) DO UPDATE SET
	provider = excluded.provider,
	base_url = excluded.base_url,
	credentials = excluded.credentials,
	models = excluded.models,
	max_concurrency = excluded.max_concurrency,
	grp = excluded.grp,
	tags = excluded.tags,
	priority = excluded.priority,
	disabled = excluded.disabled,
	updated_at = greatest(excluded.updated_at, accounts.updated_at + interval '1 millisecond'),
	version = excluded.version
WHERE $15 = '' OR accounts.id = $15
RETURNING id, created_at, updated_at`

// ListAccounts returns every account, enabled or not, ordered by name
// (bytewise), with credentials opened. It fails if any row's credentials
// cannot be opened (wrapping storage.ErrUnseal: a key is missing from the
// Sealer).
func (s *Store) ListAccounts(ctx context.Context) ([]storage.Account, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+accountColumns+` FROM accounts ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list accounts: %w", err)
	}
	defer rows.Close()
	var out []storage.Account
	for rows.Next() {
		a, err := s.scanAccount(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: list accounts: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list accounts: %w", err)
	}
	return out, nil
}

// GetAccount returns the account whose ID, or else whose Name, is idOrName,
// or an error wrapping storage.ErrNotFound.
func (s *Store) GetAccount(ctx context.Context, idOrName string) (storage.Account, error) {
	if !storage.TextOK(idOrName) {
		return storage.Account{}, fmt.Errorf("postgres: account %q: %w", idOrName, storage.ErrNotFound)
	}
	a, err := s.scanAccount(s.pool.QueryRow(ctx, `SELECT `+accountColumns+` FROM accounts WHERE `+matchIDOrName, idOrName))
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.Account{}, fmt.Errorf("postgres: account %q: %w", idOrName, storage.ErrNotFound)
	}
	if err != nil {
		return storage.Account{}, wrap(fmt.Sprintf("get account %q", idOrName), err)
	}
	return a, nil
}

// PutAccount inserts a, or updates the account with the same Name, and
// returns it as stored: ID and CreatedAt of an existing row are kept (a new
// row gets a.ID, or a fresh UUID when empty, and a.CreatedAt, or now when
// zero); UpdatedAt is now, and on an update always later than the previous
// UpdatedAt, so a changed UpdatedAt means a changed account. Times have
// millisecond precision, in UTC.
// Credentials are sealed with the Store's Sealer (its first key). Errors:
// storage.ErrInvalid when a fails Validate or holds text PostgreSQL refuses
// (invalid UTF-8, NUL bytes); storage.ErrConflict when a.ID is set and
// differs from the ID of the account that has this Name, or when a.ID belongs
// to an account with another Name (renaming is not supported).
func (s *Store) PutAccount(ctx context.Context, a storage.Account) (storage.Account, error) {
	if err := a.Validate(); err != nil {
		return storage.Account{}, fmt.Errorf("postgres: put account: %w", err)
	}
	if err := storage.CheckAccountText(&a); err != nil {
		return storage.Account{}, fmt.Errorf("postgres: put account: %w", err)
	}
	sealed, err := s.sealCredentials(a.Credentials)
	if err != nil {
		return storage.Account{}, fmt.Errorf("postgres: put account %q: %w", a.Name, err)
	}
	id := a.ID
	if id == "" {
		id = newID()
	}
	t := now()
	created := a.CreatedAt
	if created.IsZero() {
		created = t
	}
	var (
		createdAt, updatedAt time.Time
		version              int64
	)
	err = s.changeAccounts(ctx, func(tx pgx.Tx, v int64) error {
		version = v
		if a.IfVersion > 0 {
			// changeAccounts took the feed's row lock: no account changes
			// between this read and the write.
			var cur int64
			err := tx.QueryRow(ctx, `SELECT version FROM accounts WHERE name = $1`, a.Name).Scan(&cur)
			if errors.Is(err, pgx.ErrNoRows) || err == nil && cur != a.IfVersion {
				return errStale
			}
			if err != nil {
				return err
			}
		}
		err := tx.QueryRow(ctx, putAccountSQL,
			id, a.Name, string(a.Provider), a.BaseURL, sealed, list(a.Models),
			a.MaxConcurrency, a.Group, list(a.Tags), a.Priority, a.Disabled,
			ms(created), t, v, a.ID,
		).Scan(&id, &createdAt, &updatedAt)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM account_tombstones WHERE id = $1`, id)
		return err
	})
	switch {
	case errors.Is(err, errStale):
		return storage.Account{}, fmt.Errorf("postgres: put account %q: %w (version %d read)", a.Name, storage.ErrStale, a.IfVersion)
	case errors.Is(err, pgx.ErrNoRows):
		return storage.Account{}, fmt.Errorf("postgres: put account %q: %w (name belongs to another id)", a.Name, storage.ErrConflict)
	case uniqueViolation(err):
		return storage.Account{}, conflict(fmt.Sprintf("put account %q", a.Name), err)
	case err != nil:
		return storage.Account{}, wrap(fmt.Sprintf("put account %q", a.Name), err)
	}
	a.Version, a.Sealed = version, ""
	a.ID = id
	a.CreatedAt = utc(createdAt)
	a.UpdatedAt = utc(updatedAt)
	a.Models = normList(a.Models)
	a.Tags = normList(a.Tags)
	return a, nil
}

// DeleteAccount removes the account whose ID, or else whose Name, is
// idOrName, or returns an error wrapping storage.ErrNotFound.
func (s *Store) DeleteAccount(ctx context.Context, idOrName string) error {
	if !storage.TextOK(idOrName) {
		return fmt.Errorf("postgres: account %q: %w", idOrName, storage.ErrNotFound)
	}
	err := s.changeAccounts(ctx, func(tx pgx.Tx, v int64) error {
		var id string
		err := tx.QueryRow(ctx, `DELETE FROM accounts WHERE id = (SELECT id FROM accounts WHERE `+matchIDOrName+`) RETURNING id`, idOrName).Scan(&id)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO account_tombstones (id, version, deleted_at) VALUES ($1, $2, $3)
ON CONFLICT (id) DO UPDATE SET version = excluded.version, deleted_at = excluded.deleted_at`, id, v, now())
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres: account %q: %w", idOrName, storage.ErrNotFound)
	}
	if err != nil {
		return wrap(fmt.Sprintf("delete account %q", idOrName), err)
	}
	return nil
}

// changeAccounts runs fn in a transaction with the change feed's next
// version. The UPDATE locks the feed's one row until the commit, so
// writers take their versions in the order they commit: a reader that sees
// version v sees every change up to v, never v without an earlier one.
func (s *Store) changeAccounts(ctx context.Context, fn func(tx pgx.Tx, version int64) error) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var v int64
		if err := tx.QueryRow(ctx, `UPDATE account_feed SET version = version + 1 RETURNING version`).Scan(&v); err != nil {
			return fmt.Errorf("account feed: %w", err)
		}
		return fn(tx, v)
	})
}

// AccountChanges reads the account change feed after version since (0:
// every account) in one REPEATABLE READ snapshot, so the rows, the
// tombstones, the version and the pruned mark agree. A since below the
// pruned mark (a tombstone after it may be gone) is read in full. With
// open false no credentials are decrypted: they stay in Account.Sealed.
// Changed rows come ordered by version, through the accounts_version
// index.
func (s *Store) AccountChanges(ctx context.Context, since int64, open bool) (storage.AccountChanges, error) {
	var out storage.AccountChanges
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		out = storage.AccountChanges{}
		var pruned int64
		if err := tx.QueryRow(ctx, `SELECT version, pruned FROM account_feed`).Scan(&out.Version, &pruned); err != nil {
			return err
		}
		if since < pruned {
			since = 0
		}
		out.Full = since <= 0
		lower := since
		if lower <= 0 {
			lower = -1 // a full read: rows unchanged since before the feed have version 0
		}
		rows, err := tx.Query(ctx, `SELECT `+accountColumns+` FROM accounts WHERE version > $1 ORDER BY version`, lower)
		if err != nil {
			return err
		}
		for rows.Next() {
			a, err := s.scanAccountSealed(rows, open)
			if err != nil {
				rows.Close()
				return err
			}
			out.Accounts = append(out.Accounts, a)
		}
		rows.Close()
		if err := rows.Err(); err != nil || since <= 0 {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT id FROM account_tombstones WHERE version > $1 ORDER BY version`, since)
		if err != nil {
			return err
		}
		out.Deleted, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return storage.AccountChanges{}, wrap("account changes", err)
	}
	out.Version = max(out.Version, since)
	return out, nil
}

// PruneAccountTombstones deletes the tombstones of the accounts deleted
// before before, with every tombstone of a lower version, and raises the
// feed's pruned mark to the highest version deleted, in one transaction
// that holds the feed's row lock: writers and other prunes wait for it,
// and a feed read sees the tombstones and the mark before it or after it.
func (s *Store) PruneAccountTombstones(ctx context.Context, before time.Time) (int64, error) {
	if before.IsZero() {
		return 0, nil
	}
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pruned FROM account_feed FOR UPDATE`); err != nil {
			return err
		}
		var top *int64
		if err := tx.QueryRow(ctx, `SELECT max(version) FROM account_tombstones WHERE deleted_at < $1`, before.UTC()).Scan(&top); err != nil || top == nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM account_tombstones WHERE version <= $1`, *top)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		_, err = tx.Exec(ctx, `UPDATE account_feed SET pruned = greatest(pruned, $1)`, *top)
		return err
	})
	if err != nil {
		return 0, wrap("prune account tombstones", err)
	}
	return n, nil
}

// OpenCredentials opens credentials sealed by this Store (Account.Sealed).
func (s *Store) OpenCredentials(sealed string) (storage.Credentials, error) {
	c, err := s.openCredentials(sealed)
	if err != nil {
		return c, fmt.Errorf("postgres: credentials: %w", err)
	}
	return c, nil
}

func (s *Store) scanAccount(row pgx.Row) (storage.Account, error) {
	return s.scanAccountSealed(row, true)
}

// scanAccountSealed scans an account row, opening its credentials when
// open is true and otherwise leaving them in Sealed.
func (s *Store) scanAccountSealed(row pgx.Row, open bool) (storage.Account, error) {
	var (
		a                  storage.Account
		provider, sealed   string
		models, tags       []string
		maxConc, priority  int64
		createdAt, updated time.Time
	)
	if err := row.Scan(&a.ID, &a.Name, &provider, &a.BaseURL, &sealed, &models,
		&maxConc, &a.Group, &tags, &priority, &a.Disabled, &createdAt, &updated, &a.Version); err != nil {
		return storage.Account{}, err
	}
	a.Provider = storage.Provider(provider)
	a.Models, a.Tags = normList(models), normList(tags)
	a.MaxConcurrency, a.Priority = int(maxConc), int(priority)
	a.CreatedAt, a.UpdatedAt = utc(createdAt), utc(updated)
	if !open {
		a.Sealed = sealed
		return a, nil
	}
	var err error
	if a.Credentials, err = s.openCredentials(sealed); err != nil {
		return storage.Account{}, fmt.Errorf("account %q: credentials: %w", a.Name, err)
	}
	return a, nil
}

// errStale ends a conditional write's transaction: the record is not at
// the version the writer read.
var errStale = errors.New("stale")
