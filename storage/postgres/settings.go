package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/troupe-gw/troupe/storage"
)

// GetSetting returns the value of key, or an error wrapping
// storage.ErrNotFound.
func (s *Store) GetSetting(ctx context.Context, key string) (string, error) {
	if !storage.TextOK(key) {
		return "", fmt.Errorf("postgres: setting %q: %w", key, storage.ErrNotFound)
	}
	var v string
	err := s.pool.QueryRow(ctx, `SELECT value FROM settings WHERE key = $1`, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("postgres: setting %q: %w", key, storage.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("postgres: get setting %q: %w", key, err)
	}
	return v, nil
}

// PutSetting sets key to value, inserting or replacing it, and stamps the
// row's updated_at. Errors: storage.ErrInvalid when key is empty or key or
// value is not valid UTF-8 or holds a NUL byte.
func (s *Store) PutSetting(ctx context.Context, key, value string) error {
	if err := checkSetting(key, value); err != nil {
		return fmt.Errorf("postgres: put setting: %w", err)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO settings (key, value, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		key, value, now())
	if err != nil {
		return wrap(fmt.Sprintf("put setting %q", key), err)
	}
	return nil
}

// ListSettings returns every setting as a map of key to value (empty, not
// nil, when there are none).
func (s *Store) ListSettings(ctx context.Context) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT key, value FROM settings`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list settings: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("postgres: list settings: %w", err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: list settings: %w", err)
	}
	return out, nil
}

// checkSetting applies the rules both backends share to a setting.
func checkSetting(key, value string) error {
	if key == "" {
		return fmt.Errorf("%w: setting key is empty", storage.ErrInvalid)
	}
	if !storage.TextOK(key) || !storage.TextOK(value) {
		return fmt.Errorf("%w: setting %q: not valid UTF-8 text (or holds a NUL byte)", storage.ErrInvalid, key)
	}
	return nil
}
