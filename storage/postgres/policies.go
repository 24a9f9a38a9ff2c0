package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/troupe-gw/troupe/storage"
)

const policyColumns = `v.name, v.version, v.source, v.created_at, v.activated_at`

// activationLockID is the pg_advisory_xact_lock key that serializes
// ActivatePolicy across instances ("troupe" + 1).
const activationLockID = migrationLockID + 1

// nextPolicyVersionSQL creates the policies row of a new name (version 1) or
// takes the next version of an existing one; the row lock it takes
// serializes concurrent saves of one name.
const nextPolicyVersionSQL = `INSERT INTO policies AS p (name, latest_version, created_at, updated_at) VALUES ($1, 1, $2, $2)
ON CONFLICT (name) DO UPDATE SET latest_version = p.latest_version + 1, updated_at = excluded.updated_at
RETURNING latest_version`

// SavePolicy stores source as the next version of name (1 for a new name),
// with CreatedAt now (millisecond precision, UTC), and returns it. It does not
// change which version is active. Errors: storage.ErrInvalid when name is
// empty or name or source is not valid UTF-8 or holds a NUL byte.
func (s *Store) SavePolicy(ctx context.Context, name, source string) (storage.PolicyVersion, error) {
	if err := checkPolicy(name, source); err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("postgres: save policy: %w", err)
	}
	t := now()
	var version int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, nextPolicyVersionSQL, name, t).Scan(&version); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO policy_versions (name, version, source, created_at) VALUES ($1, $2, $3, $4)`,
			name, version, source, t)
		return err
	})
	if err != nil {
		return storage.PolicyVersion{}, wrap(fmt.Sprintf("save policy %q", name), err)
	}
	return storage.PolicyVersion{Name: name, Version: int(version), Source: source, CreatedAt: t}, nil
}

// GetPolicy returns version v of name, or its latest version when v <= 0,
// or an error wrapping storage.ErrNotFound.
func (s *Store) GetPolicy(ctx context.Context, name string, v int) (storage.PolicyVersion, error) {
	if !storage.TextOK(name) {
		return storage.PolicyVersion{}, fmt.Errorf("postgres: policy %q version %d: %w", name, v, storage.ErrNotFound)
	}
	var row pgx.Row
	if v <= 0 {
		row = s.pool.QueryRow(ctx, `SELECT `+policyColumns+` FROM policy_versions v WHERE v.name = $1 ORDER BY v.version DESC LIMIT 1`, name)
	} else {
		row = s.pool.QueryRow(ctx, `SELECT `+policyColumns+` FROM policy_versions v WHERE v.name = $1 AND v.version = $2`, name, int64(v))
	}
	p, err := scanPolicy(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.PolicyVersion{}, fmt.Errorf("postgres: policy %q version %d: %w", name, v, storage.ErrNotFound)
	}
	if err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("postgres: get policy %q: %w", name, err)
	}
	return p, nil
}

// PolicyHistory returns every version of name, newest first, or an error
// wrapping storage.ErrNotFound when name has none.
func (s *Store) PolicyHistory(ctx context.Context, name string) ([]storage.PolicyVersion, error) {
	if !storage.TextOK(name) {
		return nil, fmt.Errorf("postgres: policy %q: %w", name, storage.ErrNotFound)
	}
	out, err := s.queryPolicies(ctx, `SELECT `+policyColumns+` FROM policy_versions v WHERE v.name = $1 ORDER BY v.version DESC`, name)
	if err != nil {
		return nil, fmt.Errorf("postgres: policy history %q: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("postgres: policy %q: %w", name, storage.ErrNotFound)
	}
	return out, nil
}

// ListPolicies returns the latest version of every policy, ordered by name
// (bytewise); nil when there are none.
func (s *Store) ListPolicies(ctx context.Context) ([]storage.PolicyVersion, error) {
	out, err := s.queryPolicies(ctx, `SELECT `+policyColumns+` FROM policies p
		JOIN policy_versions v ON v.name = p.name AND v.version = p.latest_version ORDER BY p.name`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list policies: %w", err)
	}
	return out, nil
}

// ActivatePolicy makes version v of name (its latest when v <= 0) the active
// policy, in place of whichever version of any policy was, stamps its
// ActivatedAt with now (millisecond precision, UTC) and returns it.
// Activations are serialized across instances by a transaction advisory
// lock. Errors: storage.ErrNotFound when the version does not exist (nothing
// changes).
func (s *Store) ActivatePolicy(ctx context.Context, name string, v int) (storage.PolicyVersion, error) {
	if !storage.TextOK(name) {
		return storage.PolicyVersion{}, fmt.Errorf("postgres: policy %q version %d: %w", name, v, storage.ErrNotFound)
	}
	t := now()
	var p storage.PolicyVersion
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(activationLockID)); err != nil {
			return err
		}
		var err error
		p, err = scanPolicy(tx.QueryRow(ctx, `UPDATE policy_versions v SET activated_at = $1
			WHERE v.name = $2 AND v.version = CASE WHEN $3::bigint > 0 THEN $3::bigint ELSE (SELECT latest_version FROM policies WHERE name = $2) END
			RETURNING `+policyColumns, t, name, int64(v)))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE policies SET active_version = NULL WHERE active_version IS NOT NULL AND name <> $1`, name); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE policies SET active_version = $1, updated_at = $2 WHERE name = $3`, int64(p.Version), t, name)
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.PolicyVersion{}, fmt.Errorf("postgres: policy %q version %d: %w", name, v, storage.ErrNotFound)
	}
	if err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("postgres: activate policy %q: %w", name, err)
	}
	return p, nil
}

// ActivePolicy returns the active policy version, or an error wrapping
// storage.ErrNotFound when none was activated.
func (s *Store) ActivePolicy(ctx context.Context) (storage.PolicyVersion, error) {
	p, err := scanPolicy(s.pool.QueryRow(ctx, `SELECT `+policyColumns+` FROM policies p
		JOIN policy_versions v ON v.name = p.name AND v.version = p.active_version`))
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.PolicyVersion{}, fmt.Errorf("postgres: active policy: %w", storage.ErrNotFound)
	}
	if err != nil {
		return storage.PolicyVersion{}, fmt.Errorf("postgres: active policy: %w", err)
	}
	return p, nil
}

func (s *Store) queryPolicies(ctx context.Context, query string, args ...any) ([]storage.PolicyVersion, error) {
	rows, err := s.pool.Query(ctx, query, args...)
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

func scanPolicy(row pgx.Row) (storage.PolicyVersion, error) {
	var (
		p         storage.PolicyVersion
		version   int64
		created   time.Time
		activated *time.Time
	)
	if err := row.Scan(&p.Name, &version, &p.Source, &created, &activated); err != nil {
		return storage.PolicyVersion{}, err
	}
	p.Version = int(version)
	p.CreatedAt = created.UTC()
	if activated != nil {
		t := activated.UTC()
		p.ActivatedAt = &t
	}
	return p, nil
}

// checkPolicy applies the rules both backends share to a policy.
func checkPolicy(name, source string) error {
	if name == "" {
		return fmt.Errorf("%w: policy name is empty", storage.ErrInvalid)
	}
	if !storage.TextOK(name) || !storage.TextOK(source) {
		return fmt.Errorf("%w: policy %q: not valid UTF-8 text (or holds a NUL byte)", storage.ErrInvalid, name)
	}
	return nil
}
