// Package postgres is Troupe's production storage backend: PostgreSQL through
// a pgx/v5 connection pool (pgxpool). Several Troupe instances may share one
// database: every write is a single statement or one transaction, concurrent
// writers of the same rows serialize on row locks, and migrations run under
// an advisory lock.
//
// Layout: times are timestamptz (stored at millisecond precision, as the
// SQLite backend does, except usage record times, kept at microseconds),
// durations bigint microseconds, booleans boolean, string lists text[].
// Names and identifiers are COLLATE "C", so that ordering and comparison are
// bytewise, as in SQLite. Credentials are stored only sealed by a
// storage.Sealer; API keys only as their SHA-256. See migrations/ for the
// schema and docs/storage.md for the tables.
package postgres

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockID is the pg_advisory_lock key that serializes Migrate across
// instances sharing a database ("troupe" in ASCII).
const migrationLockID = 0x74726f757065

// stagingTable is the per-connection temporary table InsertUsage copies
// records into before inserting them into usage_records.
const stagingTable = "troupe_usage_staging"

// createStagingSQL creates stagingTable on a new connection. Its rows vanish
// at the end of every transaction.
const createStagingSQL = `CREATE TEMP TABLE IF NOT EXISTS ` + stagingTable + ` (
	request_id       text COLLATE "C" NOT NULL,
	at               timestamptz NOT NULL,
	key_id           text COLLATE "C" NOT NULL,
	account_id       text COLLATE "C" NOT NULL,
	model            text COLLATE "C" NOT NULL,
	route            text NOT NULL,
	stream           boolean NOT NULL,
	status           bigint NOT NULL,
	error_class      text NOT NULL,
	attempts         bigint NOT NULL,
	latency_us       bigint NOT NULL,
	ttft_us          bigint NOT NULL,
	input_tokens     bigint NOT NULL,
	cached_tokens    bigint NOT NULL,
	output_tokens    bigint NOT NULL,
	reasoning_tokens bigint NOT NULL,
	decision         text NOT NULL,
	estimated        boolean NOT NULL,
	cache_write_tokens bigint NOT NULL,
	user_id          text COLLATE "C" NOT NULL,
	cost             bigint NOT NULL
) ON COMMIT DELETE ROWS`

// Store is the PostgreSQL implementation of storage.Store. It is safe for
// concurrent use; create it with Open and release it with Close.
type Store struct {
	pool   *pgxpool.Pool
	sealer *storage.Sealer
}

var _ storage.Store = (*Store)(nil)

// Open connects to the PostgreSQL database named by dsn (a URL
// "postgres://user:password@host:5432/db?sslmode=disable" or a key=value
// string, with pgxpool's pool_* parameters, e.g. pool_max_conns, honoured),
// applies pending migrations (see Migrate) and returns the store.
// Credentials are sealed with sealer, which must hold every key that existing
// rows were sealed with. Errors never contain the password.
func Open(ctx context.Context, dsn string, sealer *storage.Sealer) (*Store, error) {
	if sealer == nil {
		return nil, errors.New("postgres: open: a sealer is required")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx redacts the password from its parse errors, best effort; do
		// not risk quoting the DSN.
		return nil, errors.New("postgres: open: malformed dsn")
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, createStagingSQL)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	if err := Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return &Store{pool: pool, sealer: sealer}, nil
}

// Ping checks that the database answers (a round trip on a pooled
// connection); the error says why it does not. It is the cheap probe of an
// outage wrapper (storage.Pinger).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// Close closes every connection of the pool, waiting for those in use to be
// released. The Store must not be used after.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Migrate brings the schema of the database pool connects to to the latest
// version embedded in the binary (migrations/*.sql), applying each pending
// migration in its own transaction. It first checks that every migration
// already applied is byte-for-byte the one embedded (SHA-256, recorded at
// apply time in the table goose_db_checksums) and fails without applying
// anything if one differs (the error wraps migrate.ErrChanged) or if the
// database was migrated by a newer release (migrate.ErrTooNew). Instances
// starting at once are serialized by a session advisory lock, held on a
// connection of its own. Open calls it; it is exported for the
// `troupe migrate` command and tools. Running it on an up-to-date database
// changes nothing.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	fsys, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	lock, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("postgres: migrate: lock connection: %w", err)
	}
	defer lock.Close(context.WithoutCancel(ctx))
	if _, err := lock.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrationLockID)); err != nil {
		return fmt.Errorf("postgres: migrate: take lock: %w", err)
	}
	// Closing the connection releases the lock too; unlock explicitly so
	// that a pooled lock connection (PgBouncer) would not keep it.
	defer lock.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrationLockID))
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrate.Up(ctx, db, goose.DialectPostgres, fsys); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// pgCode returns the SQLSTATE of err, or "".
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// uniqueViolation reports whether err is a UNIQUE or PRIMARY KEY violation.
func uniqueViolation(err error) bool { return pgCode(err) == "23505" }

// conflict wraps a unique violation as storage.ErrConflict, naming the
// constraint (never the value, which PostgreSQL puts in the error's detail).
func conflict(what string, err error) error {
	var pe *pgconn.PgError
	constraint := ""
	if errors.As(err, &pe) {
		constraint = pe.ConstraintName
	}
	return fmt.Errorf("postgres: %s: %w (constraint %s)", what, storage.ErrConflict, constraint)
}

// wrap turns a PostgreSQL data exception on a value (invalid UTF-8, a NUL
// byte, an out-of-range number) into storage.ErrInvalid and wraps any other
// error as is. The PostgreSQL message names the problem, not the value.
func wrap(what string, err error) error {
	if c := pgCode(err); strings.HasPrefix(c, "22") {
		return fmt.Errorf("postgres: %s: %w (%v)", what, storage.ErrInvalid, err)
	}
	return fmt.Errorf("postgres: %s: %w", what, err)
}

// now returns the current time at the precision stored (milliseconds, UTC).
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// ms returns t at the precision stored (milliseconds), in UTC.
func ms(t time.Time) time.Time { return time.UnixMilli(t.UnixMilli()).UTC() }

// utc returns a time read from the database in UTC.
func utc(t time.Time) time.Time { return t.UTC() }

// newID returns a fresh identifier: a UUIDv7, whose time-ordered prefix keeps
// primary-key inserts local in the b-tree.
func newID() string {
	id, err := uuid.NewV7()
	if err != nil { // only if the random source fails
		return uuid.NewString()
	}
	return id.String()
}

// list returns l as a text[] parameter (never NULL).
func list(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// normList returns nil for an empty list, as read back from storage.
func normList(l []string) []string {
	if len(l) == 0 {
		return nil
	}
	return l
}

// sealCredentials encodes and seals c.
func (s *Store) sealCredentials(c storage.Credentials) (string, error) {
	plain, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("encode credentials: %w", err)
	}
	sealed, err := s.sealer.Seal(plain)
	clear(plain)
	return sealed, err
}

// openCredentials unseals and decodes a credentials column.
func (s *Store) openCredentials(sealed string) (storage.Credentials, error) {
	var c storage.Credentials
	plain, err := s.sealer.Open(sealed)
	if err != nil {
		return c, err
	}
	err = json.Unmarshal(plain, &c)
	clear(plain)
	if err != nil {
		// The json error may quote the plaintext; do not wrap it.
		return storage.Credentials{}, errors.New("malformed json")
	}
	return c, nil
}
