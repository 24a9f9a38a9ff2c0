package migrate

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite"
)

const (
	v1 = "-- +goose Up\nCREATE TABLE a (x INTEGER);\n-- +goose Down\nDROP TABLE a;\n"
	v2 = "-- +goose Up\nCREATE TABLE b (y INTEGER);\n-- +goose Down\nDROP TABLE b;\n"
)

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestChangedFile edits a migration file after it was applied: Up refuses,
// naming the file, and applies nothing, not even a new migration.
func TestChangedFile(t *testing.T) {
	db := openDB(t)
	fsys := fstest.MapFS{"00001_a.sql": {Data: []byte(v1)}}
	if err := Up(t.Context(), db, goose.DialectSQLite3, fsys); err != nil {
		t.Fatalf("first Up: %v", err)
	}
	if err := Up(t.Context(), db, goose.DialectSQLite3, fsys); err != nil {
		t.Fatalf("second Up: %v", err)
	}

	edited := fstest.MapFS{
		"00001_a.sql": {Data: []byte(strings.Replace(v1, "x INTEGER", "x TEXT", 1))},
		"00002_b.sql": {Data: []byte(v2)},
	}
	err := Up(t.Context(), db, goose.DialectSQLite3, edited)
	if !errors.Is(err, ErrChanged) {
		t.Fatalf("Up with an edited migration: err = %v, want ErrChanged", err)
	}
	if !strings.Contains(err.Error(), "00001_a.sql") {
		t.Errorf("error %q does not name the file", err)
	}
	if tableExists(t, db, "b") {
		t.Error("a migration was applied although an applied one had changed")
	}

	// Restored, the new migration applies and is checksummed in turn.
	fsys["00002_b.sql"] = &fstest.MapFile{Data: []byte(v2)}
	if err := Up(t.Context(), db, goose.DialectSQLite3, fsys); err != nil {
		t.Fatalf("Up with the original file: %v", err)
	}
	if !tableExists(t, db, "b") {
		t.Error("the new migration was not applied")
	}
	var sums int
	if err := db.QueryRow(`SELECT count(*) FROM ` + ChecksumTable).Scan(&sums); err != nil || sums != 2 {
		t.Errorf("%d checksums recorded, want 2 (%v)", sums, err)
	}
	fsys["00002_b.sql"] = &fstest.MapFile{Data: []byte(v2 + "-- a comment counts too\n")}
	if err := Up(t.Context(), db, goose.DialectSQLite3, fsys); !errors.Is(err, ErrChanged) {
		t.Errorf("Up after editing the second migration: err = %v, want ErrChanged", err)
	}
}

// TestTooNew runs an older set of migrations against a database migrated
// further: Up refuses.
func TestTooNew(t *testing.T) {
	db := openDB(t)
	both := fstest.MapFS{"00001_a.sql": {Data: []byte(v1)}, "00002_b.sql": {Data: []byte(v2)}}
	if err := Up(t.Context(), db, goose.DialectSQLite3, both); err != nil {
		t.Fatal(err)
	}
	older := fstest.MapFS{"00001_a.sql": {Data: []byte(v1)}}
	if err := Up(t.Context(), db, goose.DialectSQLite3, older); !errors.Is(err, ErrTooNew) {
		t.Errorf("Up with older migrations: err = %v, want ErrTooNew", err)
	}
}

func TestUnsupportedDialect(t *testing.T) {
	db := openDB(t)
	if err := Up(t.Context(), db, goose.DialectMySQL, fstest.MapFS{"00001_a.sql": {Data: []byte(v1)}}); err == nil {
		t.Error("Up with an unsupported dialect succeeded")
	}
}
