package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/troupe-gw/troupe/storage"
)

const policyColumns = `v.name, v.version, v.source, v.created_at, v.activated_at`

// nextPolicyVersionSQL creates the policies row of a new name (version 1) or
// takes the next version of an existing one.
const nextPolicyVersionSQL = `INSERT INTO policies (name, latest_version, created_at, updated_at) VALUES (?1, 1, ?2, ?2)
ON CONFLICT (name) DO UPDATE SET latest_version = latest_version + 1, updated_at = excluded.updated_at
RETURNING latest_version`

// SavePolicy stores source as the next version of name (1 for a new name),
// with CreatedAt now (millisecond precision, UTC), and returns it. It does not
// change which version is active. Errors: storage.ErrInvalid when name is
// empty or name or source is not valid UTF-8 or holds a NUL byte (as
// PostgreSQL refuses).
func (s *Store) SavePolicy(ctx context.Context, name, source string) (_ storage.PolicyVersion, err error) {
	if name == "" {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: save policy: %w: policy name is empty", storage.ErrInvalid)
	}
	if !storage.TextOK(name) || !storage.TextOK(source) {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: save policy: %w: policy %q: not valid UTF-8 text (or holds a NUL byte)", storage.ErrInvalid, name)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: save policy %q: %w", name, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that matters is err
		}
	}()
	t := now()
	var version int
	if err := tx.QueryRowContext(ctx, nextPolicyVersionSQL, name, toMillis(t)).Scan(&version); err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: save policy %q: %w", name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO policy_versions (name, version, source, created_at) VALUES (?, ?, ?, ?)`,
		name, version, source, toMillis(t)); err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: save policy %q: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: save policy %q: commit: %w", name, err)
	}
	return storage.PolicyVersion{Name: name, Version: version, Source: source, CreatedAt: t}, nil
}

// GetPolicy returns version v of name, or its latest version when v <= 0,
// or an error wrapping storage.ErrNotFound.
func (s *Store) GetPolicy(ctx context.Context, name string, v int) (storage.PolicyVersion, error) {
	var row *sql.Row
	if v <= 0 {
		row = s.r.QueryRowContext(ctx, `SELECT `+policyColumns+` FROM policy_versions v WHERE v.name = ? ORDER BY v.version DESC LIMIT 1`, name)
	} else {
		row = s.r.QueryRowContext(ctx, `SELECT `+policyColumns+` FROM policy_versions v WHERE v.name = ? AND v.version = ?`, name, v)
	}
	p, err := scanPolicy(row)
	if errors.Is(err, sql.ErrNoRows) {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: policy %q version %d: %w", name, v, storage.ErrNotFound)
	}
	if err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: get policy %q: %w", name, err)
	}
	return p, nil
}

// PolicyHistory returns every version of name, newest first, or an error
// wrapping storage.ErrNotFound when name has none.
func (s *Store) PolicyHistory(ctx context.Context, name string) ([]storage.PolicyVersion, error) {
	out, err := s.queryPolicies(ctx, `SELECT `+policyColumns+` FROM policy_versions v WHERE v.name = ? ORDER BY v.version DESC`, name)
	if err != nil {
		return nil, fmt.Errorf("sqlite: policy history %q: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sqlite: policy %q: %w", name, storage.ErrNotFound)
	}
	return out, nil
}

// ListPolicies returns the latest version of every policy, ordered by name
// (bytewise); nil when there are none.
func (s *Store) ListPolicies(ctx context.Context) ([]storage.PolicyVersion, error) {
	out, err := s.queryPolicies(ctx, `SELECT `+policyColumns+` FROM policies p
		JOIN policy_versions v ON v.name = p.name AND v.version = p.latest_version ORDER BY p.name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list policies: %w", err)
	}
	return out, nil
}

// ActivatePolicy makes version v of name (its latest when v <= 0) the active
// policy, in place of whichever version of any policy was, stamps its
// ActivatedAt with now (millisecond precision, UTC) and returns it. Errors:
// storage.ErrNotFound when the version does not exist (nothing changes).
func (s *Store) ActivatePolicy(ctx context.Context, name string, v int) (_ storage.PolicyVersion, err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: activate policy %q: %w", name, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // the error that matters is err
		}
	}()
	t := now()
	p, err := scanPolicy(tx.QueryRowContext(ctx, `UPDATE policy_versions AS v SET activated_at = ?1
		WHERE v.name = ?2 AND v.version = CASE WHEN ?3 > 0 THEN ?3 ELSE (SELECT latest_version FROM policies WHERE name = ?2) END
		RETURNING name, version, source, created_at, activated_at`, toMillis(t), name, v))
	if errors.Is(err, sql.ErrNoRows) {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: policy %q version %d: %w", name, v, storage.ErrNotFound)
	}
	if err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: activate policy %q: %w", name, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE policies SET active_version = NULL WHERE active_version IS NOT NULL AND name <> ?`, name); err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: activate policy %q: %w", name, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE policies SET active_version = ?, updated_at = ? WHERE name = ?`, p.Version, toMillis(t), name); err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: activate policy %q: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: activate policy %q: commit: %w", name, err)
	}
	return p, nil
}

// ActivePolicy returns the active policy version, or an error wrapping
// storage.ErrNotFound when none was activated.
func (s *Store) ActivePolicy(ctx context.Context) (storage.PolicyVersion, error) {
	p, err := scanPolicy(s.r.QueryRowContext(ctx, `SELECT `+policyColumns+` FROM policies p
		JOIN policy_versions v ON v.name = p.name AND v.version = p.active_version`))
	if errors.Is(err, sql.ErrNoRows) {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: active policy: %w", storage.ErrNotFound)
	}
	if err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("sqlite: active policy: %w", err)
	}
	return p, nil
}

func (s *Store) queryPolicies(ctx context.Context, query string, args ...any) ([]storage.PolicyVersion, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []storage.PolicyVersion
	for rows.Next() {
		p, err := scanPolicy(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func scanPolicy(sc scanner) (storage.PolicyVersion, error) {
	var (
		p         storage.PolicyVersion
		createdMs int64
		activated sql.NullInt64
	)
	if err := sc.Scan(&p.Name, &p.Version, &p.Source, &createdMs, &activated); err != nil {
		return storage.PolicyVersion{}, err
	}
	p.CreatedAt = fromMillis(createdMs)
	if activated.Valid {
		t := fromMillis(activated.Int64)
		p.ActivatedAt = &t
	}
	return p, nil
}
