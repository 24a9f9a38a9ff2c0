// Package sqlite is Troupe's embedded storage backend: one SQLite file, opened
// through the pure-Go driver modernc.org/sqlite (no cgo), in WAL mode.
//
// Connections: all writes go through a pool of exactly one connection, so
// writers queue in Go (honouring ctx) instead of spinning on SQLite's busy
// lock, and a write transaction can never be refused with SQLITE_BUSY by
// another Troupe writer. Reads go through a separate pool of read-only
// connections that, thanks to WAL, never wait for the writer. No method holds
// a connection of one pool while asking for another of the same pool, so the
// single writer connection cannot deadlock.
//
// Layout: times are stored as unix milliseconds (UTC), durations as
// microseconds, booleans as 0/1, string lists as JSON arrays. Credentials are
// stored only sealed by a storage.Sealer; API keys only as their SHA-256.
// See migrations/ for the schema and docs/storage.md for the tables.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/troupe-gw/troupe/storage"
)

// MemoryPath is the path that opens a private in-memory database instead of a
// file (useful in tests). Such a store has a single connection for reads and
// writes and is lost on Close.
const MemoryPath = ":memory:"

// Store is the SQLite implementation of storage.Store. It is safe for
// concurrent use; create it with Open and release it with Close.
type Store struct {
	w      *sql.DB // exactly one connection; every write
	r      *sql.DB // read-only connections (the same as w for MemoryPath)
	sealer *storage.Sealer

	// usage are InsertUsage's statements on w's driver connection
	// (usageStmtsOn); nil until prepared.
	usage *usageStmts
	// insertErrorEvent stores one failed attempt (on w).
	insertErrorEvent *sql.Stmt
	keyByHash        *sql.Stmt // on r

	// idle gives the writer's page cache back once usage batches stop
	// coming (idle.go); zero for MemoryPath, whose cache is the database.
	idle idleRelease
	// released, when set (tests), is called after each release.
	released func()
	// afterAttemptTx, in tests, is called after each committed transaction
	// of AddAttemptCounts.
	afterAttemptTx func()
}

var _ storage.Store = (*Store)(nil)

// Open opens (creating it and its parent directories when missing) the SQLite
// database at path, applies pending migrations and returns the store.
// Credentials are sealed with sealer, which must hold every key that existing
// rows were sealed with. A new database file is created with permissions 0600
// and new directories with 0700. Connections use journal_mode=WAL,
// synchronous=NORMAL (a crash may lose the last transactions but never
// corrupts), foreign_keys=1 and busy_timeout=5000 ms; the writer's also
// temp_store=MEMORY, wal_autocheckpoint=walCheckpointPages and
// cache_size=writerCacheKiB KiB. path is a file path,
// not a DSN or URI: '?' and "file:" in it are taken literally. path may be
// MemoryPath.
func Open(ctx context.Context, path string, sealer *storage.Sealer) (*Store, error) {
	if sealer == nil {
		return nil, errors.New("sqlite: open: a sealer is required")
	}
	s := &Store{sealer: sealer}
	var err error
	if path == MemoryPath {
		s.w, err = sql.Open("sqlite", "file::memory:?"+pragmas(false).Encode())
		if err != nil {
			return nil, fmt.Errorf("sqlite: open: %w", err)
		}
		s.w.SetMaxOpenConns(1)
		s.w.SetMaxIdleConns(1)
		s.w.SetConnMaxLifetime(0)
		s.w.SetConnMaxIdleTime(0) // the database lives as long as its one connection
		s.r = s.w
	} else {
		if err := createFile(path); err != nil {
			return nil, err
		}
		if s.w, err = openPool(path, false, 1); err != nil {
			return nil, err
		}
		// The writer's connection lives as long as the store: InsertUsage's
		// statements are prepared on it (usageStmts).
		s.w.SetConnMaxIdleTime(0)
		s.idle = idleRelease{after: writerIdleRelease, release: s.releaseWriterCache}
	}
	if err := s.w.PingContext(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := Migrate(ctx, s.w); err != nil {
		s.Close()
		return nil, err
	}
	if s.r == nil {
		if s.r, err = openPool(path, true, max(4, runtime.GOMAXPROCS(0))); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.prepareUsage(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if s.insertErrorEvent, err = s.w.PrepareContext(ctx, insertErrorEventSQL); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: prepare: %w", err)
	}
	if s.keyByHash, err = s.r.PrepareContext(ctx, apiKeyByHashSQL); err != nil {
		s.Close()
		return nil, fmt.Errorf("sqlite: prepare: %w", err)
	}
	return s, nil
}

// prepareUsage prepares InsertUsage's statements on the writer's connection.
func (s *Store) prepareUsage(ctx context.Context) error {
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlite: prepare: %w", err)
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		_, err := s.usageStmtsOn(ctx, dc)
		return err
	})
}

// closeUsage closes InsertUsage's statements, on the writer's connection.
// It waits at most closeUsageWait for a write in progress to release that
// connection; past that the statements are left to the process's end (the
// driver keeps its connection's memory until they are closed), so that Close
// never waits on a stuck writer.
func (s *Store) closeUsage() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeUsageWait)
	defer cancel()
	conn, err := s.w.Conn(ctx)
	if err != nil {
		return nil // see above: not an error of the store
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		us := s.usage
		s.usage = nil
		if us == nil || us.conn != dc {
			return nil // none, or on a connection the pool closed (usageStmtsOn)
		}
		return us.close()
	})
}

// Ping checks that the database file answers a read (storage.Pinger).
func (s *Store) Ping(ctx context.Context) error {
	if err := s.r.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: ping: %w", err)
	}
	return nil
}

// closeUsageWait is how long Close waits for the writer's connection to
// close InsertUsage's statements on it (closeUsage).
const closeUsageWait = time.Second

// Close closes the database. Pending work in other goroutines fails; the
// Store must not be used after. On the last connection SQLite checkpoints
// the WAL into the main file.
func (s *Store) Close() error {
	s.idle.stop()
	var errs []error
	if s.w != nil {
		errs = append(errs, s.closeUsage())
	}
	for _, st := range []*sql.Stmt{s.insertErrorEvent, s.keyByHash} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if s.r != nil && s.r != s.w {
		errs = append(errs, s.r.Close())
	}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlite: close: %w", err)
	}
	return nil
}

// walCheckpointPages is how many pages the WAL holds before a commit
// checkpoints it into the database file (SQLite's default is 1,000): about
// 40 MiB of WAL, which the file keeps once it has grown to it. At 1,000
// req/s over 10,000 accounts each usage batch rewrites most of the hour's
// usage_hourly pages; with the default, every second batch copied them
// into the database again (BenchmarkInsertUsage, docs/benchmarks.md).
const walCheckpointPages = 10_000

// writerCacheKiB is the writer connection's page cache, in KiB (SQLite's
// default is 2,048). A usage record lands in two B-trees kept in the order
// of its request's start (usage_records_at_id, the index of request_id)
// while records arrive in the order requests end: with requests lasting up
// to a minute, at 1,000 req/s, a batch writes a leaf page here and there
// in the last minute's 60,000 entries of each, and the hour's usage_hourly
// rows over a large pool. That is about 8 MiB of pages; in 2 MiB SQLite
// spilled dirty pages mid-transaction and read the others back from the
// file in the next batch (BenchmarkInsertUsageRecorderDurations,
// docs/benchmarks.md "Issue 21: the usage table's B-trees"). It costs up to
// 6 MiB more of the process's memory.
const writerCacheKiB = 8192

// pragmas returns the DSN parameters of a connection.
func pragmas(readOnly bool) url.Values {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
		// The statement journal of a multi-row statement (InsertUsage's)
		// in memory, not in a temporary file written with a system call a
		// page.
		q.Add("_pragma", "temp_store(MEMORY)")
		// A checkpoint every walCheckpointPages pages rather than 1,000: a page
		// that every usage batch rewrites (the hour's rollup rows over a
		// large pool) is copied into the database once a checkpoint.
		q.Add("_pragma", fmt.Sprintf("wal_autocheckpoint(%d)", walCheckpointPages))
		// A page cache of writerCacheKiB instead of SQLite's 2 MiB, so that
		// the pages a usage batch writes stay in memory from batch to batch.
		q.Add("_pragma", fmt.Sprintf("cache_size(-%d)", writerCacheKiB))
		// Take the write lock at BEGIN: a deferred transaction that upgrades
		// from read to write can fail with SQLITE_BUSY at once if another
		// process (the sqlite3 shell, a second Troupe) wrote in between.
		q.Set("_txlock", "immediate")
	}
	return q
}

// openPool opens a pool of at most n connections to the file at path.
func openPool(path string, readOnly bool, n int) (*sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// A file: URI with an escaped path, so that '?' or '#' in a file name
	// cannot be taken for the start of the parameters.
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(abs), RawQuery: pragmas(readOnly).Encode()}
	db, err := sql.Open("sqlite", u.String())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(5 * time.Minute)
	return db, nil
}

// createFile makes path's parent directories (0700) and, when the file does
// not exist yet, an empty file with 0600 so that the database and the -wal and
// -shm files SQLite derives from it are private to the owner.
func createFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("sqlite: create directory for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("sqlite: create %s: %w", path, err)
	}
	return nil
}

// isConstraint reports whether err is a UNIQUE or PRIMARY KEY violation.
func isConstraint(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return false
}

// conflict wraps a constraint violation as storage.ErrConflict. SQLite's
// message names the column ("UNIQUE constraint failed: api_keys.name"), never
// the value, so it is kept.
func conflict(what string, err error) error {
	return fmt.Errorf("sqlite: %s: %w (%v)", what, storage.ErrConflict, err)
}

func toMillis(t time.Time) int64 { return t.UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// now returns the current time at the precision stored (milliseconds, UTC).
func now() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
