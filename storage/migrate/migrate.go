// Package migrate applies a storage backend's versioned SQL migrations with
// goose (github.com/pressly/goose/v3) and guards them with checksums, so that
// a migration edited after it was applied stops start-up instead of leaving
// databases whose schemas silently differ.
//
// Each backend embeds its own, per-dialect migration files (goose's
// NNNNN_name.sql format) and calls Up at start. Up records the SHA-256 of
// every applied file in the table goose_db_checksums, next to goose's own
// goose_db_version, and compares them on every run.
package migrate

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

// ChecksumTable is the table that holds the SHA-256 of every applied
// migration file: version (the file's number) and sha256 (lowercase hex).
const ChecksumTable = "goose_db_checksums"

// ErrChanged is returned (wrapped, naming the file) by Up when a migration
// that was already applied to the database differs from the one embedded in
// the binary. Nothing is applied then.
var ErrChanged = errors.New("migration was changed after it was applied to this database")

// ErrTooNew is returned (wrapped) by Up when the database has a migration
// applied that is newer than every migration the binary knows: it was
// migrated by a later Troupe release. Nothing is applied then.
var ErrTooNew = errors.New("database schema is newer than this binary")

// Up brings db to the latest migration in fsys, whose *.sql files (at its
// root) are goose migrations for dialect (goose.DialectSQLite3 or
// goose.DialectPostgres). Each pending migration is applied in its own
// transaction, in version order. Before applying anything, Up checks that
// every applied migration is byte-for-byte the file in fsys (ErrChanged) and
// that the database is not ahead of fsys (ErrTooNew); after applying, it
// records the checksums of the new ones. Running Up on an up-to-date database
// changes nothing. Up does not serialize concurrent callers: a backend that
// can be migrated by several processes at once takes a lock around it.
func Up(ctx context.Context, db *sql.DB, dialect goose.Dialect, fsys fs.FS) error {
	ph, err := placeholders(dialect)
	if err != nil {
		return err
	}
	p, err := goose.NewProvider(dialect, db, fsys,
		goose.WithDisableGlobalRegistry(true),
		goose.WithLogger(goose.NopLogger()),
	)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+ChecksumTable+` (
		version BIGINT NOT NULL PRIMARY KEY,
		sha256  TEXT   NOT NULL
	)`); err != nil {
		return fmt.Errorf("migrate: create %s: %w", ChecksumTable, err)
	}
	if err := check(ctx, db, p, fsys, ph); err != nil {
		return err
	}
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("migrate: read schema version: %w", err)
	}
	if current > target {
		return fmt.Errorf("migrate: %w (database at version %d, binary knows up to %d): upgrade Troupe", ErrTooNew, current, target)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return check(ctx, db, p, fsys, ph)
}

// placeholders returns the two bind parameters of dialect.
func placeholders(dialect goose.Dialect) ([2]string, error) {
	switch dialect {
	case goose.DialectSQLite3:
		return [2]string{"?", "?"}, nil
	case goose.DialectPostgres:
		return [2]string{"$1", "$2"}, nil
	}
	return [2]string{}, fmt.Errorf("migrate: unsupported dialect %q", dialect)
}

// check compares the checksum of every applied migration with the one
// recorded, recording it when there is none yet (a migration applied by this
// call, or by a release that predates checksums).
func check(ctx context.Context, db *sql.DB, p *goose.Provider, fsys fs.FS, ph [2]string) error {
	statuses, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrate: status: %w", err)
	}
	for _, st := range statuses {
		if st.State != goose.StateApplied {
			continue
		}
		b, err := fs.ReadFile(fsys, st.Source.Path)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		sum := sha256.Sum256(b)
		want := hex.EncodeToString(sum[:])
		var got string
		err = db.QueryRowContext(ctx, `SELECT sha256 FROM `+ChecksumTable+` WHERE version = `+ph[0], st.Source.Version).Scan(&got)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := db.ExecContext(ctx, `INSERT INTO `+ChecksumTable+` (version, sha256) VALUES (`+ph[0]+`, `+ph[1]+`)`, st.Source.Version, want); err != nil {
				return fmt.Errorf("migrate: record checksum of %s: %w", st.Source.Path, err)
			}
		case err != nil:
			return fmt.Errorf("migrate: read checksum of %s: %w", st.Source.Path, err)
		case got != want:
			return fmt.Errorf("migrate: %s: %w (sha256 now %s…, when applied %s…); refusing to start: restore the original file, or restore the database from a backup taken before it was applied",
				st.Source.Path, ErrChanged, want[:12], got[:min(12, len(got))])
		}
	}
	return nil
}
