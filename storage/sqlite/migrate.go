package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// checksumTable records the SHA-256 of every applied migration file, next to
// goose's own version table (goose_db_version), so that a migration edited
// after it was applied is detected instead of silently diverging schemas.
const checksumTable = "goose_db_checksums"

// Migrate brings the schema of db, an SQLite database opened with the
// "sqlite" driver, to the latest version embedded in the binary, applying each
// pending migration in its own transaction. It first checks that every
// migration already applied is byte-for-byte the one embedded (SHA-256,
// recorded at apply time) and fails without applying anything if one differs.
// Open calls it; it is exported for the `troupe migrate` command and tools.
// Running it on an up-to-date database changes nothing.
func Migrate(ctx context.Context, db *sql.DB) error {
	fsys, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, fsys,
		goose.WithDisableGlobalRegistry(true),
		goose.WithLogger(goose.NopLogger()),
	)
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+checksumTable+` (
		version INTEGER NOT NULL PRIMARY KEY,
		sha256  TEXT    NOT NULL
	)`); err != nil {
		return fmt.Errorf("sqlite: migrate: create checksum table: %w", err)
	}
	if err := checkMigrations(ctx, db, p, fsys); err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	return checkMigrations(ctx, db, p, fsys)
}

// checkMigrations compares the checksum of every applied migration with the
// one recorded, recording it when there is none yet.
func checkMigrations(ctx context.Context, db *sql.DB, p *goose.Provider, fsys fs.FS) error {
	statuses, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: migrate: status: %w", err)
	}
	for _, st := range statuses {
		if st.State != goose.StateApplied {
			continue
		}
		b, err := fs.ReadFile(fsys, st.Source.Path)
		if err != nil {
			return fmt.Errorf("sqlite: migrate: %w", err)
		}
		sum := sha256.Sum256(b)
		want := hex.EncodeToString(sum[:])
		var got string
		err = db.QueryRowContext(ctx, `SELECT sha256 FROM `+checksumTable+` WHERE version = ?`, st.Source.Version).Scan(&got)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := db.ExecContext(ctx, `INSERT INTO `+checksumTable+` (version, sha256) VALUES (?, ?)`, st.Source.Version, want); err != nil {
				return fmt.Errorf("sqlite: migrate: record checksum of %s: %w", st.Source.Path, err)
			}
		case err != nil:
			return fmt.Errorf("sqlite: migrate: read checksum of %s: %w", st.Source.Path, err)
		case got != want:
			return fmt.Errorf("sqlite: migrate: %s was changed after it was applied to this database (sha256 %s, applied %s)", st.Source.Path, want[:12], got[:min(12, len(got))])
		}
	}
	return nil
}
