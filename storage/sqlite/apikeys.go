package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/troupe-gw/troupe/storage"
)

const apiKeyColumns = `id, name, hash, prefix, grp, models, disabled, expires_at, created_at`

const apiKeyByHashSQL = `SELECT ` + apiKeyColumns + ` FROM api_keys WHERE hash = ?`

// CreateAPIKey stores k and returns it as stored: ID is a fresh UUID when
// empty, CreatedAt is now when zero, times have millisecond precision in UTC.
// Errors: storage.ErrInvalid when k fails Validate (Hash must be
// storage.HashKey of the secret); storage.ErrConflict when the ID, Name or
// Hash is taken.
func (s *Store) CreateAPIKey(ctx context.Context, k storage.APIKey) (storage.APIKey, error) {
	if err := k.Validate(); err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: create api key: %w", err)
	}
	if k.ID == "" {
		k.ID = newID()
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now()
	}
	k.CreatedAt = fromMillis(toMillis(k.CreatedAt))
	var expires sql.NullInt64
	if k.ExpiresAt != nil {
		t := fromMillis(toMillis(*k.ExpiresAt))
		k.ExpiresAt = &t
		expires = sql.NullInt64{Int64: toMillis(t), Valid: true}
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO api_keys (`+apiKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.Name, k.Hash, k.Prefix, k.Group, encodeList(k.Models), boolInt(k.Disabled), expires, toMillis(k.CreatedAt))
	if isConstraint(err) {
		return storage.APIKey{}, conflict(fmt.Sprintf("create api key %q", k.Name), err)
	}
	if err != nil {
		return storage.APIKey{}, fmt.Errorf("sqlite: create api key %q: %w", k.Name, err)
	}
	k.Models = normList(k.Models)
	return k, nil
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
	rows, err := s.r.QueryContext(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY name`)
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
		expires   sql.NullInt64
		createdMs int64
	)
	if err := sc.Scan(&k.ID, &k.Name, &k.Hash, &k.Prefix, &k.Group, &models, &disabled, &expires, &createdMs); err != nil {
		return storage.APIKey{}, err
	}
	var err error
	if k.Models, err = decodeList(models); err != nil {
		return storage.APIKey{}, fmt.Errorf("api key %q: models: %w", k.Name, err)
	}
	k.Disabled = disabled != 0
	if expires.Valid {
		t := fromMillis(expires.Int64)
		k.ExpiresAt = &t
	}
	k.CreatedAt = fromMillis(createdMs)
	return k, nil
}
