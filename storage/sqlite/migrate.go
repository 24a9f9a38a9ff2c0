package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"

	"github.com/troupe-gw/troupe/storage/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate brings the schema of db, an SQLite database opened with the
// "sqlite" driver, to the latest version embedded in the binary
// (migrations/*.sql), applying each pending migration in its own
// transaction. It first checks that every migration already applied is
// byte-for-byte the one embedded (SHA-256, recorded at apply time in the
// table goose_db_checksums) and fails without applying anything if one
// differs (the error wraps migrate.ErrChanged) or if the database was
// migrated by a newer release (migrate.ErrTooNew). Open calls it; it is
// exported for the `troupe migrate` command and tools. Running it on an
// up-to-date database changes nothing.
func Migrate(ctx context.Context, db *sql.DB) error {
	fsys, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	if err := migrate.Up(ctx, db, goose.DialectSQLite3, fsys); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}
