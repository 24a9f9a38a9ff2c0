package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/troupe-gw/troupe/storage"
)

// GetSetting returns the value of key, or an error wrapping
// storage.ErrNotFound.
func (s *Store) GetSetting(ctx context.Context, key string) (string, error) {
	var v string
	err := s.r.QueryRowContext(ctx, `SELECT value FROM settings WHERE key = ?`, key).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("sqlite: setting %q: %w", key, storage.ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: get setting %q: %w", key, err)
	}
	return v, nil
}

// PutSetting sets key to value, inserting or replacing it, and stamps the
// row's updated_at. Errors: storage.ErrInvalid when key is empty or key or
// value is not valid UTF-8 or holds a NUL byte (as PostgreSQL refuses).
func (s *Store) PutSetting(ctx context.Context, key, value string) error {
	if key == "" {
		return fmt.Errorf("sqlite: put setting: %w: setting key is empty", storage.ErrInvalid)
	}
	if !storage.TextOK(key) || !storage.TextOK(value) {
		return fmt.Errorf("sqlite: put setting: %w: setting %q: not valid UTF-8 text (or holds a NUL byte)", storage.ErrInvalid, key)
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO settings (key, value, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
		key, value, toMillis(now()))
	if err != nil {
		return fmt.Errorf("sqlite: put setting %q: %w", key, err)
	}
	return nil
}

// ListSettings returns every setting as a map of key to value (empty, not
// nil, when there are none).
func (s *Store) ListSettings(ctx context.Context) (map[string]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT key, value FROM settings`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list settings: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, fmt.Errorf("sqlite: list settings: %w", err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list settings: %w", err)
	}
	return out, nil
}
