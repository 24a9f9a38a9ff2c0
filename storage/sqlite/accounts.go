package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/troupe-gw/troupe/storage"
)

const accountColumns = `id, name, provider, base_url, credentials, models, max_concurrency, grp, tags, priority, disabled, created_at, updated_at, version`

// matchIDOrName selects at most one row of a table with id and name columns
// for the parameter ?1, preferring an id match over a name match (an account
// could be named like another one's id).
const matchIDOrName = `(id = ?1 OR name = ?1) ORDER BY id = ?1 DESC LIMIT 1`

// putAccountSQL inserts an account or, when the name exists, updates it in
// place keeping id and created_at. updated_at grows by at least 1 ms on every
// update (even within one millisecond, or if the clock steps back), so that
// readers can detect changes by comparing it; version (?14) is the change
// feed's. The WHERE refuses the update when the caller named an id (?15)
// that is not the existing row's; RETURNING then yields no row.
const putAccountSQL = `INSERT INTO accounts (` + accountColumns + `)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
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
	updated_at = max(excluded.updated_at, accounts.updated_at + 1),
	version = excluded.version
WHERE ?15 = '' OR accounts.id = ?15
RETURNING id, created_at, updated_at`

// ListAccounts returns every account, enabled or not, ordered by name, with
// credentials opened. It fails if any row's credentials cannot be opened
// (wrapping storage.ErrUnseal: a key is missing from the Sealer).
func (s *Store) ListAccounts(ctx context.Context) ([]storage.Account, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+accountColumns+` FROM accounts ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list accounts: %w", err)
	}
	defer rows.Close()
	var out []storage.Account
	for rows.Next() {
		a, err := s.scanAccount(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list accounts: %w", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list accounts: %w", err)
	}
	return out, nil
}

// GetAccount returns the account whose ID, or else whose Name, is idOrName,
// or an error wrapping storage.ErrNotFound.
func (s *Store) GetAccount(ctx context.Context, idOrName string) (storage.Account, error) {
	row := s.r.QueryRowContext(ctx, `SELECT `+accountColumns+` FROM accounts WHERE `+matchIDOrName, idOrName)
	a, err := s.scanAccount(row)
	if errors.Is(err, sql.ErrNoRows) {
		return storage.Account{}, fmt.Errorf("sqlite: account %q: %w", idOrName, storage.ErrNotFound)
	}
	if err != nil {
		return storage.Account{}, fmt.Errorf("sqlite: get account %q: %w", idOrName, err)
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
// storage.ErrStale when a.IfVersion is set and the account is not at it;
// storage.ErrInvalid when a fails Validate or has text that is not valid
// UTF-8 or holds a NUL byte (as PostgreSQL refuses); storage.ErrConflict when
// a.ID is set and differs from the ID of the account that has this Name, or
// when a.ID belongs to an account with another Name (renaming is not
// supported).
func (s *Store) PutAccount(ctx context.Context, a storage.Account) (storage.Account, error) {
	if err := a.Validate(); err != nil {
		return storage.Account{}, fmt.Errorf("sqlite: put account: %w", err)
	}
	if err := storage.CheckAccountText(&a); err != nil {
		return storage.Account{}, fmt.Errorf("sqlite: put account: %w", err)
	}
	creds, err := json.Marshal(a.Credentials)
	if err != nil {
		return storage.Account{}, fmt.Errorf("sqlite: put account %q: encode credentials: %w", a.Name, err)
	}
	sealed, err := s.sealer.Seal(creds)
	clear(creds)
	if err != nil {
		return storage.Account{}, fmt.Errorf("sqlite: put account %q: %w", a.Name, err)
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
	var createdMs, updatedMs, version int64
	err = s.changeAccounts(ctx, func(tx *sql.Tx, v int64) error {
		version = v
		if a.IfVersion > 0 {
			var cur int64
			err := tx.QueryRowContext(ctx, `SELECT version FROM accounts WHERE name = ?`, a.Name).Scan(&cur)
			if errors.Is(err, sql.ErrNoRows) || err == nil && cur != a.IfVersion {
				return errStale
			}
			if err != nil {
				return err
			}
		}
		err := tx.QueryRowContext(ctx, putAccountSQL,
			id, a.Name, string(a.Provider), a.BaseURL, sealed, encodeList(a.Models),
			a.MaxConcurrency, a.Group, encodeList(a.Tags), a.Priority, boolInt(a.Disabled),
			toMillis(created), toMillis(t), v, a.ID,
		).Scan(&id, &createdMs, &updatedMs)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM account_tombstones WHERE id = ?`, id)
		return err
	})
	switch {
	case errors.Is(err, errStale):
		return storage.Account{}, fmt.Errorf("sqlite: put account %q: %w (version %d read)", a.Name, storage.ErrStale, a.IfVersion)
	case errors.Is(err, sql.ErrNoRows):
		return storage.Account{}, fmt.Errorf("sqlite: put account %q: %w (name belongs to another id)", a.Name, storage.ErrConflict)
	case isConstraint(err):
		return storage.Account{}, conflict(fmt.Sprintf("put account %q", a.Name), err)
	case err != nil:
		return storage.Account{}, fmt.Errorf("sqlite: put account %q: %w", a.Name, err)
	}
	a.Version, a.Sealed = version, ""
	a.ID = id
	a.CreatedAt = fromMillis(createdMs)
	a.UpdatedAt = fromMillis(updatedMs)
	a.Models = normList(a.Models)
	a.Tags = normList(a.Tags)
	return a, nil
}

// DeleteAccount removes the account whose ID, or else whose Name, is
// idOrName, or returns an error wrapping storage.ErrNotFound.
func (s *Store) DeleteAccount(ctx context.Context, idOrName string) error {
	err := s.changeAccounts(ctx, func(tx *sql.Tx, v int64) error {
		var id string
		err := tx.QueryRowContext(ctx, `DELETE FROM accounts WHERE id = (SELECT id FROM accounts WHERE `+matchIDOrName+`) RETURNING id`, idOrName).Scan(&id)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO account_tombstones (id, version, deleted_at) VALUES (?1, ?2, ?3)
ON CONFLICT (id) DO UPDATE SET version = excluded.version, deleted_at = excluded.deleted_at`, id, v, toMillis(now()))
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("sqlite: account %q: %w", idOrName, storage.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sqlite: delete account %q: %w", idOrName, err)
	}
	return nil
}

// changeAccounts runs fn in a write transaction with the change feed's next
// version, committed with it. The Store's one writer connection orders the
// versions as the commits.
func (s *Store) changeAccounts(ctx context.Context, fn func(tx *sql.Tx, version int64) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	var v int64
	if err := tx.QueryRowContext(ctx, `UPDATE account_feed SET version = version + 1 RETURNING version`).Scan(&v); err != nil {
		return fmt.Errorf("account feed: %w", err)
	}
	if err := fn(tx, v); err != nil {
		return err
	}
	return tx.Commit()
}

// AccountChanges reads the account change feed after version since (0:
// every account) in one read transaction, so the rows, the tombstones,
// the version and the pruned mark agree. A since below the pruned mark (a
// tombstone after it may be gone) is read in full. With open false no
// credentials are decrypted: they stay in Account.Sealed. Changed rows
// come ordered by version, through the accounts_version index.
func (s *Store) AccountChanges(ctx context.Context, since int64, open bool) (storage.AccountChanges, error) {
	var out storage.AccountChanges
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return out, fmt.Errorf("sqlite: account changes: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	var pruned int64
	if err := tx.QueryRowContext(ctx, `SELECT version, pruned FROM account_feed`).Scan(&out.Version, &pruned); err != nil {
		return out, fmt.Errorf("sqlite: account changes: %w", err)
	}
	if since < pruned {
		since = 0
	}
	out.Full = since <= 0
	rows, err := tx.QueryContext(ctx, `SELECT `+accountColumns+` FROM accounts WHERE version > ? ORDER BY version`, sinceOrAll(since))
	if err != nil {
		return out, fmt.Errorf("sqlite: account changes: %w", err)
	}
	for rows.Next() {
		a, err := s.scanAccountSealed(rows, open)
		if err != nil {
			rows.Close()
			return out, fmt.Errorf("sqlite: account changes: %w", err)
		}
		out.Accounts = append(out.Accounts, a)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("sqlite: account changes: %w", err)
	}
	if since > 0 {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM account_tombstones WHERE version > ? ORDER BY version`, since)
		if err != nil {
			return out, fmt.Errorf("sqlite: account changes: %w", err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return out, fmt.Errorf("sqlite: account changes: %w", err)
			}
			out.Deleted = append(out.Deleted, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, fmt.Errorf("sqlite: account changes: %w", err)
		}
	}
	out.Version = max(out.Version, since)
	return out, nil
}

// PruneAccountTombstones deletes the tombstones of the accounts deleted
// before before, with every tombstone of a lower version, and raises the
// feed's pruned mark to the highest version deleted, in one write
// transaction (the Store's one writer orders it with the feed's changes).
func (s *Store) PruneAccountTombstones(ctx context.Context, before time.Time) (int64, error) {
	if before.IsZero() {
		return 0, nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("sqlite: prune account tombstones: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	var top sql.NullInt64
	if err := tx.QueryRowContext(ctx, `SELECT max(version) FROM account_tombstones WHERE deleted_at < ?`, toMillis(before)).Scan(&top); err != nil {
		return 0, fmt.Errorf("sqlite: prune account tombstones: %w", err)
	}
	if !top.Valid {
		return 0, nil
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM account_tombstones WHERE version <= ?`, top.Int64)
	if err != nil {
		return 0, fmt.Errorf("sqlite: prune account tombstones: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlite: prune account tombstones: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE account_feed SET pruned = max(pruned, ?)`, top.Int64); err != nil {
		return 0, fmt.Errorf("sqlite: prune account tombstones: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("sqlite: prune account tombstones: %w", err)
	}
	return n, nil
}

// sinceOrAll is the lower bound (exclusive) of a feed read's versions: -1
// for a full read, which also takes rows unchanged since before the feed
// (version 0).
func sinceOrAll(since int64) int64 {
	if since <= 0 {
		return -1
	}
	return since
}

// OpenCredentials opens credentials sealed by this Store (Account.Sealed).
func (s *Store) OpenCredentials(sealed string) (storage.Credentials, error) {
	var c storage.Credentials
	plain, err := s.sealer.Open(sealed)
	if err != nil {
		return c, fmt.Errorf("sqlite: credentials: %w", err)
	}
	err = json.Unmarshal(plain, &c)
	clear(plain)
	if err != nil {
		// The json error may quote the plaintext; do not wrap it.
		return storage.Credentials{}, errors.New("sqlite: credentials: malformed json")
	}
	return c, nil
}

// scanner is the Scan method shared by *sql.Row and *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func (s *Store) scanAccount(sc scanner) (storage.Account, error) {
	return s.scanAccountSealed(sc, true)
}

// scanAccountSealed scans an account row, opening its credentials when
// open is true and otherwise leaving them in Sealed.
func (s *Store) scanAccountSealed(sc scanner, open bool) (storage.Account, error) {
	var (
		a                  storage.Account
		provider, sealed   string
		models, tags       string
		disabled           int
		createdMs, updated int64
	)
	if err := sc.Scan(&a.ID, &a.Name, &provider, &a.BaseURL, &sealed, &models,
		&a.MaxConcurrency, &a.Group, &tags, &a.Priority, &disabled, &createdMs, &updated, &a.Version); err != nil {
		return storage.Account{}, err
	}
	a.Provider = storage.Provider(provider)
	a.Disabled = disabled != 0
	a.CreatedAt = fromMillis(createdMs)
	a.UpdatedAt = fromMillis(updated)
	var err error
	if a.Models, err = decodeList(models); err != nil {
		return storage.Account{}, fmt.Errorf("account %q: models: %w", a.Name, err)
	}
	if a.Tags, err = decodeList(tags); err != nil {
		return storage.Account{}, fmt.Errorf("account %q: tags: %w", a.Name, err)
	}
	if !open {
		a.Sealed = sealed
		return a, nil
	}
	plain, err := s.sealer.Open(sealed)
	if err != nil {
		return storage.Account{}, fmt.Errorf("account %q: credentials: %w", a.Name, err)
	}
	err = json.Unmarshal(plain, &a.Credentials)
	clear(plain)
	if err != nil {
		// The json error may quote the plaintext; do not wrap it.
		return storage.Account{}, fmt.Errorf("account %q: credentials: malformed json", a.Name)
	}
	return a, nil
}

// affectedOne turns a DELETE's result into nil or storage.ErrNotFound.
func affectedOne(res sql.Result, what, idOrName string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqlite: delete %s %q: %w", what, idOrName, err)
	}
	if n == 0 {
		return fmt.Errorf("sqlite: %s %q: %w", what, idOrName, storage.ErrNotFound)
	}
	return nil
}

// newID returns a fresh identifier: a UUIDv7, whose time-ordered prefix keeps
// primary-key inserts local in the b-tree.
func newID() string {
	id, err := uuid.NewV7()
	if err != nil { // only if the random source fails
		return uuid.NewString()
	}
	return id.String()
}

// encodeList encodes a string list as a JSON array ("[]" when empty).
func encodeList(l []string) string {
	if len(l) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(l) // a []string always encodes
	return string(b)
}

// decodeList decodes a JSON array of strings; an empty array gives nil.
func decodeList(s string) ([]string, error) {
	if s == "" || s == "[]" {
		return nil, nil
	}
	var l []string
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return nil, err
	}
	return normList(l), nil
}

// normList returns nil for an empty list, as read back from storage.
func normList(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	return l
}

// errStale ends a conditional write's transaction: the record is not at
// the version the writer read.
var errStale = errors.New("stale")
