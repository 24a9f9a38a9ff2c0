package postgres

import (
	"io/fs"
	"testing"
)

// migrations returns how many migrations are embedded in the binary.
func migrations(t *testing.T) int {
	t.Helper()
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil || len(names) == 0 {
		t.Fatalf("embedded migrations: %v (%d)", err, len(names))
	}
	return len(names)
}
