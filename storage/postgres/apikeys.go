package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/troupe-gw/troupe/storage"
)

const apiKeyColumns = `id, name, hash, prefix, grp, models, disabled, expires_at, created_at, rpm, rpd, tokens_per_day, admin, weight, user_id`

// apiKeyReadColumns are the columns a read scans (scanAPIKey): the
// inserted ones and the revision, which only updates write.
const apiKeyReadColumns = apiKeyColumns + `, revision`

const apiKeyByHashSQL = `SELECT ` + apiKeyReadColumns + ` FROM api_keys WHERE hash = $1`

// CreateAPIKey stores k and returns it as stored: ID is a fresh UUID when
// empty, CreatedAt is now when zero, times have millisecond precision in UTC.
// Errors: storage.ErrInvalid when k fails Validate (Hash must be
// storage.HashKey of the secret), has a negative limit or has text that is
// not valid UTF-8 or holds a NUL byte; storage.ErrConflict when the ID, Name
// or Hash is taken.
func (s *Store) CreateAPIKey(ctx context.Context, k storage.APIKey) (storage.APIKey, error) {
	if err := k.Validate(); err != nil {
		return storage.APIKey{}, fmt.Errorf("postgres: create api key: %w", err)
	}
	if err := k.Limits.Validate(); err != nil {
		return storage.APIKey{}, fmt.Errorf("postgres: create api key %q: %w", k.Name, err)
	}
	if err := storage.CheckKeyText(&k); err != nil {
		return storage.APIKey{}, fmt.Errorf("postgres: create api key: %w", err)
	}
	if err := storage.NormKeyWeight(&k); err != nil {
		return storage.APIKey{}, fmt.Errorf("postgres: create api key: %w", err)
	}
	if k.ID == "" {
		k.ID = newID()
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now()
	}
	k.CreatedAt = ms(k.CreatedAt)
	if k.ExpiresAt != nil {
		t := ms(*k.ExpiresAt)
		k.ExpiresAt = &t
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
		k.ID, k.Name, k.Hash, k.Prefix, k.Group, list(k.Models), k.Disabled, k.ExpiresAt, k.CreatedAt,
		k.Limits.RPM, k.Limits.RPD, k.Limits.TokensPerDay, k.Admin, k.Weight, optString(k.UserID))
	if pgCode(err) == "23503" {
		return storage.APIKey{}, fmt.Errorf("postgres: create api key %q: %w: no user %q", k.Name, storage.ErrInvalid, k.UserID)
	}
	if uniqueViolation(err) {
		return storage.APIKey{}, conflict(fmt.Sprintf("create api key %q", k.Name), err)
	}
	if err != nil {
		return storage.APIKey{}, wrap(fmt.Sprintf("create api key %q", k.Name), err)
	}
	k.Models = normList(k.Models)
	k.Revision, k.IfRevision = 1, 0 // the column's default
	return k, nil
}

// APIKeyByHash returns the key whose Hash equals hash (disabled and expired
// keys included: the caller decides), or an error wrapping
// storage.ErrNotFound. It is one unique-index lookup on a statement pgx
// prepares once per connection. Errors never contain hash.
func (s *Store) APIKeyByHash(ctx context.Context, hash string) (storage.APIKey, error) {
	if !storage.TextOK(hash) {
		return storage.APIKey{}, fmt.Errorf("postgres: api key by hash: %w", storage.ErrNotFound)
	}
	k, err := scanAPIKey(s.pool.QueryRow(ctx, apiKeyByHashSQL, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.APIKey{}, fmt.Errorf("postgres: api key by hash: %w", storage.ErrNotFound)
	}
	if err != nil {
		return storage.APIKey{}, fmt.Errorf("postgres: api key by hash: %w", err)
	}
	return k, nil
}

// ListAPIKeys returns every key ordered by name (bytewise).
func (s *Store) ListAPIKeys(ctx context.Context) ([]storage.APIKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+apiKeyReadColumns+` FROM api_keys ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list api keys: %w", err)
	}
	defer rows.Close()
	var out []storage.APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: list api keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list api keys: %w", err)
	}
	return out, nil
}

// DeleteAPIKey removes the key whose ID, or else whose Name, is idOrName, or
// returns an error wrapping storage.ErrNotFound.
func (s *Store) DeleteAPIKey(ctx context.Context, idOrName string) error {
	if !storage.TextOK(idOrName) {
		return fmt.Errorf("postgres: api key %q: %w", idOrName, storage.ErrNotFound)
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM api_keys WHERE id = (SELECT id FROM api_keys WHERE `+matchIDOrName+`)`, idOrName)
	if err != nil {
		return wrap(fmt.Sprintf("delete api key %q", idOrName), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: api key %q: %w", idOrName, storage.ErrNotFound)
	}
	return nil
}

// UpdateAPIKey replaces Name, Group, Models, Disabled, ExpiresAt, Limits and
// Admin of the key whose ID is k.ID and returns the key as stored (Hash,
// Prefix and CreatedAt are the stored ones; k's are ignored). Errors:
// storage.ErrNotFound when no key has that ID; storage.ErrConflict when
// another key has the Name; storage.ErrInvalid when Name is empty, a limit
// is negative or text is not valid UTF-8 or holds a NUL byte.
func (s *Store) UpdateAPIKey(ctx context.Context, k storage.APIKey) (storage.APIKey, error) {
	if k.Name == "" {
		return storage.APIKey{}, fmt.Errorf("postgres: update api key %q: %w: name is empty", k.ID, storage.ErrInvalid)
	}
	if err := k.Limits.Validate(); err != nil {
		return storage.APIKey{}, fmt.Errorf("postgres: update api key %q: %w", k.ID, err)
	}
	if err := storage.CheckKeyText(&k); err != nil {
		return storage.APIKey{}, fmt.Errorf("postgres: update api key: %w", err)
	}
	if err := storage.NormKeyWeight(&k); err != nil {
		return storage.APIKey{}, fmt.Errorf("postgres: update api key: %w", err)
	}
	if err := storage.CheckKeyOwner(&k); err != nil {
		return storage.APIKey{}, fmt.Errorf("postgres: update api key: %w", err)
	}
	var expires *time.Time
	if k.ExpiresAt != nil {
		t := ms(*k.ExpiresAt)
		expires = &t
	}
	got, err := scanAPIKey(s.pool.QueryRow(ctx, `UPDATE api_keys SET name = $1, grp = $2, models = $3, disabled = $4,
		expires_at = $5, rpm = $6, rpd = $7, tokens_per_day = $8, admin = $9, weight = $11, revision = revision + 1
		WHERE id = $10 AND ($12 = 0 OR revision = $12) RETURNING `+apiKeyReadColumns,
		k.Name, k.Group, list(k.Models), k.Disabled, expires, k.Limits.RPM, k.Limits.RPD, k.Limits.TokensPerDay, k.Admin, k.ID, k.Weight, k.IfRevision))
	switch {
	case errors.Is(err, pgx.ErrNoRows) && k.IfRevision > 0 && s.apiKeyExists(ctx, k.ID):
		return storage.APIKey{}, fmt.Errorf("postgres: update api key %q: %w (revision %d read)", k.ID, storage.ErrStale, k.IfRevision)
	case errors.Is(err, pgx.ErrNoRows):
		return storage.APIKey{}, fmt.Errorf("postgres: api key %q: %w", k.ID, storage.ErrNotFound)
	case uniqueViolation(err):
		return storage.APIKey{}, conflict(fmt.Sprintf("update api key %q", k.ID), err)
	case err != nil:
		return storage.APIKey{}, wrap(fmt.Sprintf("update api key %q", k.ID), err)
	}
	return got, nil
}

func scanAPIKey(row pgx.Row) (storage.APIKey, error) {
	var (
		k       storage.APIKey
		models  []string
		expires *time.Time
		created time.Time
		userID  *string
	)
	if err := row.Scan(&k.ID, &k.Name, &k.Hash, &k.Prefix, &k.Group, &models, &k.Disabled, &expires, &created,
		&k.Limits.RPM, &k.Limits.RPD, &k.Limits.TokensPerDay, &k.Admin, &k.Weight, &userID, &k.Revision); err != nil {
		return storage.APIKey{}, err
	}
	k.Models = normList(models)
	if userID != nil {
		k.UserID = *userID
	}
	if expires != nil {
		t := expires.UTC()
		k.ExpiresAt = &t
	}
	k.CreatedAt = created.UTC()
	return k, nil
}

// apiKeyExists reports whether a key with id is stored (a conditional
// update that matched nothing tells a stale revision from a missing key).
func (s *Store) apiKeyExists(ctx context.Context, id string) bool {
	var one int
	return s.pool.QueryRow(ctx, `SELECT 1 FROM api_keys WHERE id = $1`, id).Scan(&one) == nil
}
