package storagetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultPostgresURL is the PostgreSQL server the tests use when
// TROUPE_TEST_PG_URL is not set: the local one, with trust authentication.
const DefaultPostgresURL = "postgres://root@127.0.0.1:5432/test?sslmode=disable"

// PostgresURL returns TROUPE_TEST_PG_URL, or DefaultPostgresURL.
func PostgresURL() string {
	if u := os.Getenv("TROUPE_TEST_PG_URL"); u != "" {
		return u
	}
	return DefaultPostgresURL
}

// PostgresDB creates a new, empty database troupe_t_<random> (the prefix is
// TROUPE_TEST_PG_PREFIX when set, lower-case letters, digits and _) on the server
// of PostgresURL and returns the URL of it; the database is dropped (with
// whatever connections remain) when t ends. Each caller gets its own
// database, so tests may run in parallel. When the server cannot be reached,
// t is skipped, unless TROUPE_REQUIRE_SERVICES=1, which makes it fail.
// The server URL must be a postgres:// URL whose user may create databases.
func PostgresDB(t testing.TB) string {
	t.Helper()
	admin := PostgresURL()
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("TROUPE_TEST_PG_URL must be a postgres:// URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		if os.Getenv("TROUPE_REQUIRE_SERVICES") == "1" {
			t.Fatalf("PostgreSQL at %s is required (TROUPE_REQUIRE_SERVICES=1): %v", u.Redacted(), err)
		}
		t.Skipf("PostgreSQL at %s is unreachable (set TROUPE_TEST_PG_URL): %v", u.Redacted(), err)
	}
	defer conn.Close(context.Background())
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "troupe_t_"
	if p := os.Getenv("TROUPE_TEST_PG_PREFIX"); p != "" && strings.Trim(p, "abcdefghijklmnopqrstuvwxyz0123456789_") == "" {
		prefix = p // a shared server's naming rule (lower-case letters, digits, _)
	}
	name := prefix + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}
