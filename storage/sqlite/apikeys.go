package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

const apiKeyColumns = `id, name, hash, prefix, grp, models, disabled, expires_at, created_at, rpm, rpd, tokens_per_day, admin, weight, user_id`

// apiKeyReadColumns are the columns a read scans (scanAPIKey): the
// inserted ones and the revision, which only updates write.
const apiKeyReadColumns = apiKeyColumns + `, revision`

const apiKeyByHashSQL = `SELECT ` + apiKeyReadColumns + ` FROM api_keys WHERE hash = ?`

// updateAPIKeySQL replaces the mutable columns of the key with id ?10.
// When ?12 is positive, only a key at revision ?12 is updated.
const updateAPIKeySQL = `UPDATE api_keys SET name = ?1, grp = ?2, models = ?3, disabled = ?4, expires_at = ?5,
	rpm = ?6, rpd = ?7, tokens_per_day = ?8, admin = ?9, weight = ?11, revision = revision + 1
WHERE id = ?10 AND (?12 = 0 OR revision = ?12)
RETURNING ` + apiKeyReadColumns

// CreateAPIKey stores k and returns it as stored: ID is a fresh UUID when
// empty, CreatedAt is now when zero, times have millisecond precision in UTC.
// Errors: storage.ErrInvalid when k fails Validate (Hash must be
// storage.HashKey of the secret), has a negative limit or has text that is
// not valid UTF-8 or holds a NUL byte; storage.ErrConflict when the ID, Name
// or Hash is taken.
func (s *Store) CreateAPIKey(ctx context.Context, k storage.APIKey) (storage.APIKey, error) {
	if err := k.Validate(); err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: create api key: %w", err)
	}
	if err := k.Limits.Validate(); err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: create api key %q: %w", k.Name, err)
	}
	if err := storage.CheckKeyText(&k); err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: create api key: %w", err)
	}
	if err := storage.NormKeyWeight(&k); err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: create api key: %w", err)
	}
	if k.ID == "" {
		k.ID = newID()
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now()
	}
	k.CreatedAt = fromMillis(toMillis(k.CreatedAt))
	expires := nullMillis(k.ExpiresAt)
	_, err := s.w.ExecContext(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Name, k.Hash, k.Prefix, k.Group, encodeList(k.Models), boolInt(k.Disabled), expires, toMillis(k.CreatedAt),
		k.Limits.RPM, k.Limits.RPD, k.Limits.TokensPerDay, boolInt(k.Admin), k.Weight, nullString(k.UserID))
	if isForeignKey(err) {
		return storage.APIKey{}, fmt.Errorf("sqlite: create api key %q: %w: no user %q", k.Name, storage.ErrInvalid, k.UserID)
	}
	if isConstraint(err) {
		return storage.APIKey{}, conflict(fmt.Sprintf("create api key %q", k.Name), err)
	}
	if err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: create api key %q: %w", k.Name, err)
	}
	k.Models = normList(k.Models)
	if expires.Valid {
		t := fromMillis(expires.Int64)
		k.ExpiresAt = &t
	}
	k.Revision, k.IfRevision = 1, 0 // the column's default
	return k, nil
}

// UpdateAPIKey replaces Name, Group, Models, Disabled, ExpiresAt, Limits and
// Admin of the key whose ID is k.ID and returns the key as stored (Hash,
// Prefix and CreatedAt are the stored ones; k's are ignored). Errors:
// storage.ErrNotFound when no key has that ID; storage.ErrConflict when
// another key has the Name; storage.ErrInvalid when Name is empty, a limit
// is negative or text is not valid UTF-8 or holds a NUL byte.
func (s *Store) UpdateAPIKey(ctx context.Context, k storage.APIKey) (storage.APIKey, error) {
	if k.Name == "" {
		return storage.APIKey{}, fmt.Errorf("sqlite: update api key %q: %w: name is empty", k.ID, storage.ErrInvalid)
	}
	if err := k.Limits.Validate(); err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: update api key %q: %w", k.ID, err)
	}
	if err := storage.CheckKeyText(&k); err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: update api key: %w", err)
	}
	if err := storage.NormKeyWeight(&k); err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: update api key: %w", err)
	}
	if err := storage.CheckKeyOwner(&k); err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: update api key: %w", err)
	}
	got, err := scanAPIKey(s.w.QueryRowContext(ctx, updateAPIKeySQL,
		k.Name, k.Group, encodeList(k.Models), boolInt(k.Disabled), nullMillis(k.ExpiresAt),
		k.Limits.RPM, k.Limits.RPD, k.Limits.TokensPerDay, boolInt(k.Admin), k.ID, k.Weight, k.IfRevision))
	switch {
	case errors.Is(err, sql.ErrNoRows) && k.IfRevision > 0 && s.apiKeyExists(ctx, k.ID):
		return storage.APIKey{}, fmt.Errorf("sqlite: update api key %q: %w (revision %d read)", k.ID, storage.ErrStale, k.IfRevision)
	case errors.Is(err, sql.ErrNoRows):
		return storage.APIKey{}, fmt.Errorf("sqlite: api key %q: %w", k.ID, storage.ErrNotFound)
	case isConstraint(err):
		return storage.APIKey{}, conflict(fmt.Sprintf("update api key %q", k.ID), err)
	case err != nil:
		return storage.APIKey{}, fmt.Errorf("sqlite: update api key %q: %w", k.ID, err)
	}
	return got, nil
}

// nullMillis converts an optional time to unix milliseconds or NULL.
func nullMillis(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: toMillis(*t), Valid: true}
}

// APIKeyByHash returns the key whose Hash equals hash (disabled and expired
// keys included: the caller decides), or an error wrapping
// storage.ErrNotFound. It is one indexed lookup on a prepared statement.
// Errors never contain hash.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (storage.APIKey, error) {
	k, err := scanAPIKey(s.keyByHash.QueryRowContext(ctx, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return storage.APIKey{}, fmt.Errorf("sqlite: api key by hash: %w", storage.ErrNotFound)
	}
	if err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: api key by hash: %w", err)
	}
	return k, nil
}

// ListAPIKeys returns every key ordered by name.
func (s *Store) ListAPIKeys(ctx context.Context) ([]storage.APIKey, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+apiKeyReadColumns+` FROM api_keys ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list api keys: %w", err)
	}
	defer rows.Close()
	var out []storage.APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list api keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list api keys: %w", err)
	}
	return out, nil
}

// DeleteAPIKey removes the key whose ID, or else whose Name, is idOrName, or
// returns an error wrapping storage.ErrNotFound.
func (s *Store) DeleteAPIKey(ctx context.Context, idOrName string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM api_keys WHERE id = (SELECT id FROM api_keys WHERE `+matchIDOrName+`)`, idOrName)
	if err != nil {
		return fmt.Errorf("sqlite: delete api key %q: %w", idOrName, err)
	}
	return affectedOne(res, "api key", idOrName)
}

func scanAPIKey(sc scanner) (storage.APIKey, error) {
	var (
		k         storage.APIKey
		models    string
		disabled  int
		admin     int
		userID    sql.NullString
		expires   sql.NullInt64
		createdMs int64
	)
	if err := sc.Scan(&k.ID, &k.Name, &k.Hash, &k.Prefix, &k.Group, &models, &disabled, &expires, &createdMs,
		&k.Limits.RPM, &k.Limits.RPD, &k.Limits.TokensPerDay, &admin, &k.Weight, &userID, &k.Revision); err != nil {
		return storage.APIKey{}, err
	}
	var err error
	if k.Models, err = decodeList(models); err != nil {
		return storage.APIKey{}, fmt.Errorf("api key %q: models: %w", k.Name, err)
	}
	k.Disabled = disabled != 0
	k.Admin = admin != 0
	k.UserID = userID.String
	if expires.Valid {
		t := fromMillis(expires.Int64)
		k.ExpiresAt = &t
	}
	k.CreatedAt = fromMillis(createdMs)
	return k, nil
}

// apiKeyExists reports whether a key with id is stored (a conditional
// update that matched nothing tells a stale revision from a missing key).
func (s *Store) apiKeyExists(ctx context.Context, id string) bool {
	var one int
	return s.r.QueryRowContext(ctx, `SELECT 1 FROM api_keys WHERE id = ?`, id).Scan(&one) == nil
}
