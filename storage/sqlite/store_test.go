package sqlite

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/migrate"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

func testKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, storage.KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func testSealer(t testing.TB, keys ...[]byte) *storage.Sealer {
	t.Helper()
	if len(keys) == 0 {
		keys = [][]byte{testKey(t)}
	}
	s, err := storage.NewSealer(keys[0], keys[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openAt(t testing.TB, path string, sealer *storage.Sealer) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, sealer)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestContract(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store {
		return openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	})
}

func TestContractMemory(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store {
		return openAt(t, MemoryPath, testSealer(t))
	})
}

func TestOpenRequiresSealer(t *testing.T) {
	if _, err := Open(t.Context(), filepath.Join(t.TempDir(), "x.db"), nil); err == nil {
		t.Fatal("Open without a sealer succeeded")
	}
}

// TestNoPlaintextOnDisk reads every file SQLite wrote (main file, -wal, -shm)
// while the store is open and again after Close, looking for the secrets.
func TestNoPlaintextOnDisk(t *testing.T) {
	const token = "sk-secret-PLAINTEXT-123"
	const apiSecret = "sk-troupe-CLIENTSECRET-9f8e7d6c5b4a"
	dir := t.TempDir()
	path := filepath.Join(dir, "troupe.db")
	s, err := Open(t.Context(), path, testSealer(t))
	if err != nil {
		t.Fatal(err)
	}
	a := storagetest.SampleAccount("leaky")
	a.Credentials = storage.Credentials{APIKey: token, AccessToken: token, RefreshToken: token, IDToken: token}
	if _, err := s.PutAccount(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateAPIKey(t.Context(), storage.APIKey{Name: "client", Hash: storage.HashKey(apiSecret), Prefix: apiSecret[:14]}); err != nil {
		t.Fatal(err)
	}
	// The row is really there, and sealed.
	var sealed string
	if err := s.r.QueryRow(`SELECT credentials FROM accounts WHERE name = 'leaky'`).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sealed, "v1:k") {
		t.Errorf("credentials column = %.12q…, want a sealed value", sealed)
	}

	scan := func(when string) {
		t.Helper()
		files, err := filepath.Glob(path + "*")
		if err != nil || len(files) == 0 {
			t.Fatalf("no database files: %v", err)
		}
		var total int
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			total += len(b)
			for _, secret := range []string{token, apiSecret, "PLAINTEXT", "CLIENTSECRET"} {
				if bytes.Contains(b, []byte(secret)) {
					t.Errorf("%s: %s contains %q", when, filepath.Base(f), secret)
				}
			}
		}
		// Sanity: the scan looks at real data (the account name is stored in clear).
		found := false
		for _, f := range files {
			b, _ := os.ReadFile(f)
			found = found || bytes.Contains(b, []byte("leaky"))
		}
		if !found {
			t.Errorf("%s: %d bytes scanned in %v and the account name is not in them", when, total, files)
		}
	}
	scan("open")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	scan("closed")
}

func TestFilePermissions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new", "dir", "troupe.db")
	openAt(t, path, testSealer(t))
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("database file mode = %v, want 0600", fi.Mode().Perm())
	}
	di, err := os.Stat(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if di.Mode().Perm() != 0o700 {
		t.Errorf("created directory mode = %v, want 0700", di.Mode().Perm())
	}
}

func TestPathWithSpecialCharacters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a dir?x=1#frag", "tr%20oupe.db")
	s := openAt(t, path, testSealer(t))
	if _, err := s.PutAccount(t.Context(), storagetest.SampleAccount("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database not at the given path: %v", err)
	}
}

func TestWAL(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	for _, db := range []struct {
		name string
		q    string
		want string
	}{
		{"journal_mode", "PRAGMA journal_mode", "wal"},
		{"foreign_keys", "PRAGMA foreign_keys", "1"},
		{"busy_timeout", "PRAGMA busy_timeout", "5000"},
		{"synchronous", "PRAGMA synchronous", "1"},
	} {
		var got string
		if err := s.w.QueryRow(db.q).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != db.want {
			t.Errorf("writer %s = %s, want %s", db.name, got, db.want)
		}
	}
	// Readers are read-only.
	if _, err := s.r.Exec(`DELETE FROM accounts`); err == nil {
		t.Error("a write through the read pool succeeded")
	}
}

func TestPersistsAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "troupe.db")
	key := testKey(t)
	s, err := Open(t.Context(), path, testSealer(t, key))
	if err != nil {
		t.Fatal(err)
	}
	put, err := s.PutAccount(t.Context(), storagetest.SampleAccount("kept"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InsertUsage(t.Context(), storagetest.SampleUsage("u", 3)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, testSealer(t, key))
	got, err := s.GetAccount(t.Context(), "kept")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != put.ID || got.Credentials != put.Credentials || !got.CreatedAt.Equal(put.CreatedAt) {
		t.Errorf("after reopen got %+v, want %+v", got, put)
	}
	if n, err := s.CountUsage(t.Context()); err != nil || n != 3 {
		t.Errorf("CountUsage after reopen = %d, %v", n, err)
	}
}

// TestKeyRotation seals with an old key, reopens with [new, old], checks that
// the old rows open and that a write re-seals them with the new key, after
// which the old key can be dropped.
func TestKeyRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "troupe.db")
	oldKey, newKey := testKey(t), testKey(t)
	s, err := Open(t.Context(), path, testSealer(t, oldKey))
	if err != nil {
		t.Fatal(err)
	}
	a := storagetest.SampleAccount("rot")
	if _, err := s.PutAccount(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Only the new key: the old row cannot be opened, and the error says so
	// without leaking the secret.
	s, err = Open(t.Context(), path, testSealer(t, newKey))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.GetAccount(t.Context(), "rot")
	if !errors.Is(err, storage.ErrUnseal) {
		t.Errorf("GetAccount with the wrong key: err = %v, want ErrUnseal", err)
	}
	if err != nil && strings.Contains(err.Error(), a.Credentials.AccessToken) {
		t.Errorf("error leaks the credentials: %v", err)
	}
	if _, err := s.ListAccounts(t.Context()); !errors.Is(err, storage.ErrUnseal) {
		t.Errorf("ListAccounts with the wrong key: err = %v, want ErrUnseal", err)
	}
	s.Close()

	// New first, old after: reads work, a write re-seals under the new key.
	rotating := testSealer(t, newKey, oldKey)
	s, err = Open(t.Context(), path, rotating)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.GetAccount(t.Context(), "rot")
	if err != nil {
		t.Fatalf("GetAccount with [new, old]: %v", err)
	}
	if got.Credentials != a.Credentials {
		t.Error("credentials changed across rotation")
	}
	var sealed string
	if err := s.r.QueryRow(`SELECT credentials FROM accounts`).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if rotating.Current(sealed) {
		t.Error("the row claims the new key before it was rewritten")
	}
	if _, err := s.PutAccount(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	if err := s.r.QueryRow(`SELECT credentials FROM accounts`).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if !rotating.Current(sealed) || !strings.HasPrefix(sealed, "v1:"+storage.KeyID(newKey)+":") {
		t.Errorf("the rewritten row is not sealed with the new key (%.13s…)", sealed)
	}
	s.Close()

	s = openAt(t, path, testSealer(t, newKey))
	if got, err := s.GetAccount(t.Context(), "rot"); err != nil || got.Credentials != a.Credentials {
		t.Errorf("with the new key only after rewrite: %v", err)
	}
}

func TestTamperedCredentials(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	if _, err := s.PutAccount(t.Context(), storagetest.SampleAccount("t")); err != nil {
		t.Fatal(err)
	}
	// Swap the 30th character (inside the base64 payload, whose every bit
	// counts there) for another one.
	if _, err := s.w.Exec(`UPDATE accounts SET credentials = substr(credentials, 1, 29) ||
		CASE substr(credentials, 30, 1) WHEN 'A' THEN 'B' ELSE 'A' END || substr(credentials, 31)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetAccount(t.Context(), "t"); !errors.Is(err, storage.ErrUnseal) {
		t.Errorf("GetAccount of a tampered row: err = %v, want ErrUnseal", err)
	}
}

func TestMigrate(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	// Idempotent.
	if err := Migrate(t.Context(), s.w); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	// The operator-facing tables and the indexes exist.
	for _, name := range []string{"accounts", "api_keys", "usage_records", "usage_hourly",
		"settings", "policies", "policies_one_active", "policy_versions", "admin_users", "usage_records_at_id", "goose_db_version", migrate.ChecksumTable} {
		var n int
		if err := s.r.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = ?`, name).Scan(&n); err != nil || n != 1 {
			t.Errorf("schema object %s: count %d, %v", name, n, err)
		}
	}
	var sums int
	if err := s.r.QueryRow(`SELECT count(*) FROM ` + migrate.ChecksumTable).Scan(&sums); err != nil || sums != migrations(t) {
		t.Errorf("%d checksums recorded, want %d (%v)", sums, migrations(t), err)
	}
	// A database migrated by a newer release is refused.
	if _, err := s.w.Exec(`INSERT INTO goose_db_version (version_id, is_applied) VALUES (99, 1)`); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(t.Context(), s.w); !errors.Is(err, migrate.ErrTooNew) {
		t.Errorf("Migrate on a newer schema: err = %v, want migrate.ErrTooNew", err)
	}
}

// TestTamperedMigration changes the recorded checksum of an applied
// migration (as if its file had been edited after it was applied): the next
// Open refuses to start, naming the file.
func TestTamperedMigration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "troupe.db")
	s := openAt(t, path, testSealer(t))
	if _, err := s.w.Exec(`UPDATE ` + migrate.ChecksumTable + ` SET sha256 = 'deadbeef' WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(t.Context(), path, testSealer(t))
	if !errors.Is(err, migrate.ErrChanged) {
		t.Fatalf("Open after tampering: err = %v, want migrate.ErrChanged", err)
	}
	for _, want := range []string{"00001_init.sql", "changed after it was applied"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Logf("start-up refused: %v", err)
}

// TestUsageLoad writes 100,000 records in batches of 500 from 4 goroutines
// (with retried and doubly written batches), then checks that every record is
// there and that usage_hourly agrees exactly with the sums computed from
// usage_records in SQL. Under the race detector, which slows the SQLite
// engine down about 30 times (over a minute for the full run), it writes
// 20,000 records: the full run is `go test -run TestUsageLoad ./storage/sqlite`.
func TestUsageLoad(t *testing.T) {
	n := 100_000
	if raceEnabled {
		n = 20_000
		t.Logf("race detector: writing %d records instead of 100,000", n)
	}
	s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	start := time.Now()
	recs := storagetest.WriteLoad(t, s, "load", n, 500, 4)
	t.Logf("%d records (and their retries) written in %v", n, time.Since(start).Round(time.Millisecond))
	storagetest.CheckUsage(t, s, recs)

	var records, groups, onlyRecords, onlyHourly int64
	err := s.r.QueryRow(`WITH r AS (
		SELECT at - at % 3600000 AS hour, key_id, account_id, model, status, count(*) AS requests,
			sum(input_tokens), sum(cached_tokens), sum(output_tokens), sum(reasoning_tokens), sum(cost)
		FROM usage_records GROUP BY 1, 2, 3, 4, 5
	), h AS (
		SELECT hour, key_id, account_id, model, status, requests,
			input_tokens, cached_tokens, output_tokens, reasoning_tokens, cost
		FROM usage_hourly
	)
	SELECT (SELECT count(*) FROM usage_records), (SELECT count(*) FROM h),
		(SELECT count(*) FROM (SELECT * FROM r EXCEPT SELECT * FROM h)),
		(SELECT count(*) FROM (SELECT * FROM h EXCEPT SELECT * FROM r))`).Scan(&records, &groups, &onlyRecords, &onlyHourly)
	if err != nil {
		t.Fatal(err)
	}
	if records != int64(n) || onlyRecords != 0 || onlyHourly != 0 {
		t.Errorf("usage_records has %d rows (want %d); %d groups of the records differ from usage_hourly, %d rows of usage_hourly from the records",
			records, n, onlyRecords, onlyHourly)
	}
	t.Logf("%d records in %d rollup rows, agreeing exactly", records, groups)
}

// TestMigrationBackfillsRollups stores records with the version-1 schema (no
// rollups yet), then opens the store: migration 2 builds usage_hourly from
// them, so the rollups agree with every record.
func TestMigrationBackfillsRollups(t *testing.T) {
	path := filepath.Join(t.TempDir(), "troupe.db")
	if err := createFile(path); err != nil {
		t.Fatal(err)
	}
	db, err := openPool(path, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := fs.ReadFile(migrationFiles, "migrations/00001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(t.Context(), db, goose.DialectSQLite3, fstest.MapFS{"00001_init.sql": {Data: v1}}); err != nil {
		t.Fatal(err)
	}
	recs := storagetest.VariedUsage("old", 0, 3000)
	recs[0].At = time.Date(1969, 12, 31, 23, 30, 0, 0, time.UTC) // before 1970: the hour still rounds down
	for i := range recs {
		recs[i].Cost = 0 // version 1 has no cost
	}
	for _, r := range recs {
		if _, err := db.Exec(`INSERT INTO usage_records (request_id, at, key_id, account_id, model, status, input_tokens, cached_tokens, output_tokens, reasoning_tokens)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.RequestID, r.At.UnixMilli(), r.KeyID, r.AccountID, r.Model, r.Status,
			r.InputTokens, r.CachedTokens, r.OutputTokens, r.ReasoningTokens); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s := openAt(t, path, testSealer(t))
	storagetest.CheckUsage(t, s, recs)
	more := storagetest.VariedUsage("new", 0, 500)
	if err := s.InsertUsage(t.Context(), more); err != nil {
		t.Fatal(err)
	}
	storagetest.CheckUsage(t, s, append(recs, more...))
}

// migrationsUpTo returns the embedded migrations up to version n, for
// building a database as an older release left it.
func migrationsUpTo(t *testing.T, n int) fstest.MapFS {
	t.Helper()
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	out := fstest.MapFS{}
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		if v, err := strconv.Atoi(base[:5]); err != nil || v > n {
			continue
		}
		data, err := fs.ReadFile(migrationFiles, name)
		if err != nil {
			t.Fatal(err)
		}
		out[base] = &fstest.MapFile{Data: data}
	}
	return out
}

// TestMigrationRollupCost stores records with their cost and the rollups
// version 12 kept of them (cost a REAL that InsertUsage never added to), and
// a rollup row whose records were pruned, then opens the store: migration 13
// makes usage_hourly.cost an INTEGER of micro-units, each group's the sum of
// its records' cost, and the pruned group's its old value in micro-units.
// Records stored after are added to it.
func TestMigrationRollupCost(t *testing.T) {
	path := filepath.Join(t.TempDir(), "troupe.db")
	if err := createFile(path); err != nil {
		t.Fatal(err)
	}
	db, err := openPool(path, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(t.Context(), db, goose.DialectSQLite3, migrationsUpTo(t, 12)); err != nil {
		t.Fatal(err)
	}
	recs := storagetest.VariedUsage("old", 0, 3000)
	recs[0].At = time.Date(1969, 12, 31, 23, 30, 0, 0, time.UTC) // before 1970: the hour still rounds down
	for _, r := range recs {
		if _, err := db.Exec(`INSERT INTO usage_records (request_id, at, key_id, account_id, model, status, input_tokens, cached_tokens, output_tokens, reasoning_tokens, cost)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, r.RequestID, r.At.UnixMilli(), r.KeyID, r.AccountID, r.Model, r.Status,
			r.InputTokens, r.CachedTokens, r.OutputTokens, r.ReasoningTokens, r.Cost); err != nil {
			t.Fatal(err)
		}
	}
	// The rollups as version 12's InsertUsage left them: every cost 0.
	if _, err := db.Exec(`INSERT INTO usage_hourly (hour, key_id, account_id, model, status,
		requests, input_tokens, cached_tokens, output_tokens, reasoning_tokens, cost)
		SELECT at - ((at % 3600000) + 3600000) % 3600000, key_id, account_id, model, status,
			count(*), sum(input_tokens), sum(cached_tokens), sum(output_tokens), sum(reasoning_tokens), 0.0
		FROM usage_records GROUP BY 1, 2, 3, 4, 5`); err != nil {
		t.Fatal(err)
	}
	pruned := storage.UsageRollup{Hour: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), KeyID: "gone", Model: "m", Status: 200, Requests: 3, Cost: 250_000}
	if _, err := db.Exec(`INSERT INTO usage_hourly (hour, key_id, account_id, model, status, requests, cost) VALUES (?, 'gone', '', 'm', 200, 3, 0.25)`,
		pruned.Hour.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := openAt(t, path, testSealer(t))
	got, err := s.Rollups(t.Context(), storage.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	storagetest.EqualRollups(t, "rollups after migration 13", got, append([]storage.UsageRollup{pruned}, storagetest.RollupsOf(recs)...))
	var typ string
	var notNull, reals int
	var def any
	if err := s.r.QueryRow(`SELECT type, "notnull", dflt_value, (SELECT count(*) FROM usage_hourly WHERE typeof(cost) <> 'integer')
		FROM pragma_table_info('usage_hourly') WHERE name = 'cost' AND cid = (SELECT max(cid) FROM pragma_table_info('usage_hourly'))`).Scan(&typ, &notNull, &def, &reals); err != nil {
		t.Fatalf("usage_hourly.cost, last column: %v", err)
	}
	if typ != "INTEGER" || notNull != 1 || def != "0" || reals != 0 {
		t.Errorf("usage_hourly.cost: type %s, not null %d, default %v, %d values not integers; want INTEGER NOT NULL DEFAULT 0, none", typ, notNull, def, reals)
	}
	more := storagetest.VariedUsage("new", 0, 500)
	if err := s.InsertUsage(t.Context(), more); err != nil {
		t.Fatal(err)
	}
	got, err = s.Rollups(t.Context(), storage.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	storagetest.EqualRollups(t, "rollups after more records", got, append([]storage.UsageRollup{pruned}, storagetest.RollupsOf(append(recs, more...))...))
}

// TestMigrationAdminDefault stores a key with the version-2 schema (no admin
// column yet), then opens the store: migration 3 adds api_keys.admin, the old
// key reads back as not admin, and it can be made one.
func TestMigrationAdminDefault(t *testing.T) {
	path := filepath.Join(t.TempDir(), "troupe.db")
	if err := createFile(path); err != nil {
		t.Fatal(err)
	}
	db, err := openPool(path, false, 1)
	if err != nil {
		t.Fatal(err)
	}
	v2 := fstest.MapFS{}
	for _, name := range []string{"00001_init.sql", "00002_limits_rollups_settings_policies.sql"} {
		b, err := fs.ReadFile(migrationFiles, "migrations/"+name)
		if err != nil {
			t.Fatal(err)
		}
		v2[name] = &fstest.MapFile{Data: b}
	}
	if err := migrate.Up(t.Context(), db, goose.DialectSQLite3, v2); err != nil {
		t.Fatal(err)
	}
	old := storagetest.SampleAPIKey("old")
	if _, err := db.Exec(`INSERT INTO api_keys (id, name, hash, prefix, grp, models, disabled, created_at, rpm)
		VALUES ('key-old', ?, ?, ?, ?, '["gpt-5"]', 0, 1767225600000, 7)`, old.Name, old.Hash, old.Prefix, old.Group); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s := openAt(t, path, testSealer(t))
	k, err := s.APIKeyByHash(t.Context(), old.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if k.Admin || k.ID != "key-old" || k.Limits.RPM != 7 {
		t.Errorf("key stored before migration 3 reads back as %+v, want not admin", k)
	}
	k.Admin = true
	if _, err := s.UpdateAPIKey(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	if k, err := s.APIKeyByHash(t.Context(), old.Hash); err != nil || !k.Admin {
		t.Errorf("after granting admin: %+v, %v", k, err)
	}
}

// TestInsertUsageNewWriterConn: InsertUsage's driver statements live on the
// writer's connection (usageStmts); when the pool hands out a new one, they
// are prepared on it, and batches (with a record stored already, which takes
// the record-a-statement path) and their rollups are stored as before.
func TestInsertUsageNewWriterConn(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	s.w.SetMaxIdleConns(0) // every write on a new connection
	ctx := context.Background()
	recs := storagetest.VariedUsage("r", 0, 300)
	if err := s.InsertUsage(ctx, recs[:200]); err != nil {
		t.Fatal(err)
	}
	first := s.usage
	if err := s.InsertUsage(ctx, recs[100:]); err != nil { // 100 stored already
		t.Fatal(err)
	}
	if s.usage == first {
		t.Error("the statements were not prepared on the new connection")
	}
	if n, err := s.CountUsage(ctx); err != nil || n != 300 {
		t.Errorf("CountUsage = %d, %v; want 300", n, err)
	}
	rolls, err := s.Rollups(ctx, storage.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var requests int64
	for _, r := range rolls {
		requests += r.Requests
	}
	if requests != 300 {
		t.Errorf("rollups count %d requests, want 300", requests)
	}
}

// TestInsertUsageRollupsAfterPrune: a batch with nearly a rollup row a
// record has its rollups read from the records above the largest rowid
// stored before it (addRecordRollupsSQL). After the newest records are
// pruned (the largest rowid falls, so new rows take rowids the pruned ones
// had), such a batch, the same batch retried and a batch with a record of
// it repeated still add exactly what they store, as batches of few rows do
// (upsertRollupsSQL).
func TestInsertUsageRollupsAfterPrune(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	ctx := context.Background()
	recs := storagetest.VariedUsage("r", 0, 400)
	for i := range recs {
		if i < 300 {
			recs[i].AccountID = "acct-1" // few rows
		} else {
			recs[i].AccountID = "acct-" + strconv.Itoa(i) // a row each
		}
	}
	if recordRollups(len(storagetest.RollupsOf(recs[:200])), 200) || !recordRollups(len(storagetest.RollupsOf(recs[300:350])), 50) {
		t.Fatal("the test's batches do not take both ways")
	}
	later := recs[:200]
	for i := range later {
		later[i].At = later[i].At.Add(24 * time.Hour)
	}
	if err := s.InsertUsage(ctx, later); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertUsage(ctx, recs[200:300]); err != nil {
		t.Fatal(err)
	}
	// Every record goes: rowids start again at 1.
	if n, _, err := s.PruneUsage(ctx, later[0].At.Add(48*time.Hour), time.Time{}); err != nil || n != 300 {
		t.Fatalf("PruneUsage = %d, %v; want 300 records", n, err)
	}
	if err := s.InsertUsage(ctx, recs[300:350]); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertUsage(ctx, recs[300:350]); err != nil { // retried: nothing added
		t.Fatal(err)
	}
	if err := s.InsertUsage(ctx, append(append([]storage.UsageRecord(nil), recs[350:]...), recs[340], recs[399])); err != nil {
		t.Fatal(err)
	}
	got, err := s.Rollups(ctx, storage.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	storagetest.EqualRollups(t, "rollups", got, storagetest.RollupsOf(recs))
	if n, err := s.CountUsage(ctx); err != nil || n != 100 {
		t.Errorf("CountUsage = %d, %v; want 100", n, err)
	}
}

// TestInsertUsageRowidsExhausted: past the largest rowid SQLite would
// choose new rowids at random, below those stored, and the rollups would
// miss records (addRecordRollupsSQL); InsertUsage refuses the batch instead and
// stores nothing of it.
func TestInsertUsageRowidsExhausted(t *testing.T) {
	s := openAt(t, filepath.Join(t.TempDir(), "troupe.db"), testSealer(t))
	ctx := context.Background()
	if _, err := s.w.ExecContext(ctx, `INSERT INTO usage_records (rowid, request_id, at) VALUES (?, 'high', 0)`, int64(math.MaxInt64-1)); err != nil {
		t.Fatal(err)
	}
	recs := storagetest.VariedUsage("r", 0, 2)
	if err := s.InsertUsage(ctx, recs); err == nil {
		t.Fatal("InsertUsage of 2 records after rowid MaxInt64-1 succeeded")
	}
	if err := s.InsertUsage(ctx, recs[:1]); err != nil {
		t.Fatalf("InsertUsage of the one record that fits: %v", err)
	}
	if n, err := s.CountUsage(ctx); err != nil || n != 2 {
		t.Errorf("CountUsage = %d, %v; want 2", n, err)
	}
	got, err := s.Rollups(ctx, storage.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	storagetest.EqualRollups(t, "rollups", got, storagetest.RollupsOf(recs[:1]))
}
