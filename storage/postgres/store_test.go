package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
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

func openAt(t testing.TB, dsn string, sealer *storage.Sealer) *Store {
	t.Helper()
	s, err := Open(context.Background(), dsn, sealer)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sqlConn opens a plain connection to dsn for inspecting or tampering with
// the database behind the store's back.
func sqlConn(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func TestContract(t *testing.T) {
	t.Parallel()
	storagetest.Run(t, func(t *testing.T) storage.Store {
		return openAt(t, storagetest.PostgresDB(t), testSealer(t))
	})
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	if _, err := Open(t.Context(), storagetest.PostgresURL(), nil); err == nil {
		t.Error("Open without a sealer succeeded")
	}
	const password = "s3cret-PASSWORD"
	for _, dsn := range []string{
		"postgres://troupe:" + password + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=2", // nothing listens on port 1
		"postgres://troupe:" + password + "@127.0.0.1:5432/db?sslmode=bogus",                  // malformed
	} {
		_, err := Open(t.Context(), dsn, testSealer(t))
		if err == nil {
			t.Errorf("Open(%s) succeeded", storagetest.PostgresURL())
			continue
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("the error leaks the password: %v", err)
		}
	}
}

// TestNoPlaintextInRows stores an account and an API key, then reads every
// row of every table of the database as text and looks for the secrets.
func TestNoPlaintextInRows(t *testing.T) {
	t.Parallel()
	const token = "sk-secret-PLAINTEXT-123"
	const apiSecret = "sk-troupe-CLIENTSECRET-9f8e7d6c5b4a"
	dsn := storagetest.PostgresDB(t)
	s := openAt(t, dsn, testSealer(t))
	a := storagetest.SampleAccount("leaky")
	a.Credentials = storage.Credentials{APIKey: token, AccessToken: token, RefreshToken: token, IDToken: token}
	if _, err := s.PutAccount(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	k, err := s.CreateAPIKey(t.Context(), storage.APIKey{Name: "client", Hash: storage.HashKey(apiSecret), Prefix: apiSecret[:14]})
	if err != nil {
		t.Fatal(err)
	}
	k.Limits.RPM = 5
	if _, err := s.UpdateAPIKey(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertUsage(t.Context(), storagetest.SampleUsage("u", 3)); err != nil {
		t.Fatal(err)
	}
	c := sqlConn(t, dsn)
	var sealed string
	if err := c.QueryRow(t.Context(), `SELECT credentials FROM accounts WHERE name = 'leaky'`).Scan(&sealed); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sealed, "v1:k") {
		t.Errorf("credentials column = %.12q…, want a sealed value", sealed)
	}
	rows, err := c.Query(t.Context(), `SELECT quote_ident(table_name) FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, table := range tables {
		var text string
		if err := c.QueryRow(t.Context(), `SELECT coalesce(string_agg(t::text, E'\n'), '') FROM `+table+` t`).Scan(&text); err != nil {
			t.Fatal(err)
		}
		all.WriteString(text)
		for _, secret := range []string{token, apiSecret, "PLAINTEXT", "CLIENTSECRET"} {
			if strings.Contains(text, secret) {
				t.Errorf("table %s contains %q", table, secret)
			}
		}
	}
	// Sanity: the scan looked at real data.
	for _, want := range []string{"leaky", storage.HashKey(apiSecret), "u-1"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("%d bytes of rows from %v and %q is not in them", all.Len(), tables, want)
		}
	}
}

// TestTamperedMigration changes the recorded checksum of an applied
// migration (as if its file had been edited after it was applied): the next
// Open refuses to start, naming the file.
func TestTamperedMigration(t *testing.T) {
	t.Parallel()
	dsn := storagetest.PostgresDB(t)
	s := openAt(t, dsn, testSealer(t))
	s.Close()
	c := sqlConn(t, dsn)
	if _, err := c.Exec(t.Context(), `UPDATE `+migrate.ChecksumTable+` SET sha256 = repeat('0', 64) WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), dsn, testSealer(t))
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

// TestMigrate checks the schema, that Migrate is idempotent, that instances
// migrating one database at once are serialized, and that a database
// migrated by a newer release is refused.
func TestMigrate(t *testing.T) {
	t.Parallel()
	dsn := storagetest.PostgresDB(t)
	s := openAt(t, dsn, testSealer(t))

	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := Migrate(t.Context(), s.pool); err != nil {
				t.Errorf("concurrent Migrate: %v", err)
			}
		})
	}
	wg.Wait()

	c := sqlConn(t, dsn)
	for _, table := range []string{"accounts", "api_keys", "usage_records", "usage_hourly", "settings", "policies", "policy_versions", "admin_users", "goose_db_version", migrate.ChecksumTable} {
		var n int
		if err := c.QueryRow(t.Context(), `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1`, table).Scan(&n); err != nil || n != 1 {
			t.Errorf("table %s: count %d, %v", table, n, err)
		}
	}
	var versions, sums int
	if err := c.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM goose_db_version WHERE version_id > 0), (SELECT count(*) FROM `+migrate.ChecksumTable+`)`).Scan(&versions, &sums); err != nil {
		t.Fatal(err)
	}
	if n := migrations(t); versions != n || sums != n {
		t.Errorf("after concurrent migrations: %d versions applied, %d checksums; want %d and %d", versions, sums, n, n)
	}

	if _, err := c.Exec(t.Context(), `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99, true)`); err != nil {
		t.Fatal(err)
	}
	err := Migrate(t.Context(), s.pool)
	if !errors.Is(err, migrate.ErrTooNew) {
		t.Errorf("Migrate on a newer schema: err = %v, want migrate.ErrTooNew", err)
	}
}

// TestKeyRotation seals with an old key, reopens with [new, old], checks that
// the old rows open and that a write re-seals them with the new key, after
// which the old key can be dropped.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	dsn := storagetest.PostgresDB(t)
	oldKey, newKey := testKey(t), testKey(t)
	s := openAt(t, dsn, testSealer(t, oldKey))
	a := storagetest.SampleAccount("rot")
	if _, err := s.PutAccount(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openAt(t, dsn, testSealer(t, newKey))
	_, err := s.GetAccount(t.Context(), "rot")
	if !errors.Is(err, storage.ErrUnseal) {
		t.Errorf("GetAccount with the wrong key: err = %v, want ErrUnseal", err)
	}
	if err != nil && strings.Contains(err.Error(), a.Credentials.AccessToken) {
		t.Errorf("error leaks the credentials: %v", err)
	}
	s.Close()

	rotating := testSealer(t, newKey, oldKey)
	s = openAt(t, dsn, rotating)
	got, err := s.GetAccount(t.Context(), "rot")
	if err != nil {
		t.Fatalf("GetAccount with [new, old]: %v", err)
	}
	if got.Credentials != a.Credentials {
		t.Error("credentials changed across rotation")
	}
	c := sqlConn(t, dsn)
	sealedOf := func() string {
		var sealed string
		if err := c.QueryRow(t.Context(), `SELECT credentials FROM accounts`).Scan(&sealed); err != nil {
			t.Fatal(err)
		}
		return sealed
	}
	if rotating.Current(sealedOf()) {
		t.Error("the row claims the new key before it was rewritten")
	}
	if _, err := s.PutAccount(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	if sealed := sealedOf(); !rotating.Current(sealed) || !strings.HasPrefix(sealed, "v1:"+storage.KeyID(newKey)+":") {
		t.Errorf("the rewritten row is not sealed with the new key (%.13s…)", sealed)
	}
	s.Close()

	s = openAt(t, dsn, testSealer(t, newKey))
	if got, err := s.GetAccount(t.Context(), "rot"); err != nil || got.Credentials != a.Credentials {
		t.Errorf("with the new key only after rewrite: %v", err)
	}
}

// TestUsageLoad writes 100,000 records in batches of 500 from 4 goroutines
// (with retried and doubly written batches), then checks that every record is
// there and that usage_hourly agrees exactly with the sums computed from
// usage_records in SQL.
func TestUsageLoad(t *testing.T) {
	t.Parallel()
	dsn := storagetest.PostgresDB(t)
	s := openAt(t, dsn, testSealer(t))
	start := time.Now()
	recs := storagetest.WriteLoad(t, s, "load", 100_000, 500, 4)
	t.Logf("100,000 records (and their retries) written in %v", time.Since(start).Round(time.Millisecond))
	storagetest.CheckUsage(t, s, recs)

	c := sqlConn(t, dsn)
	var records, groups, onlyRecords, onlyHourly int64
	err := c.QueryRow(t.Context(), `WITH r AS (
		SELECT date_trunc('hour', at, 'UTC') AS hour, key_id, account_id, model, status, count(*) AS requests,
			sum(input_tokens) AS i, sum(cached_tokens) AS c, sum(output_tokens) AS o, sum(reasoning_tokens) AS re, sum(cost) AS co
		FROM usage_records GROUP BY 1, 2, 3, 4, 5
	), h AS (
		SELECT hour, key_id, account_id, model, status, requests,
			input_tokens::numeric, cached_tokens::numeric, output_tokens::numeric, reasoning_tokens::numeric, cost::numeric
		FROM usage_hourly
	)
	SELECT (SELECT count(*) FROM usage_records), (SELECT count(*) FROM h),
		(SELECT count(*) FROM (SELECT * FROM r EXCEPT SELECT * FROM h) x),
		(SELECT count(*) FROM (SELECT * FROM h EXCEPT SELECT * FROM r) y)`).Scan(&records, &groups, &onlyRecords, &onlyHourly)
	if err != nil {
		t.Fatal(err)
	}
	if records != 100_000 || onlyRecords != 0 || onlyHourly != 0 {
		t.Errorf("usage_records has %d rows (want 100000); %d groups of the records differ from usage_hourly, %d rows of usage_hourly from the records",
			records, onlyRecords, onlyHourly)
	}
	t.Logf("%d records in %d rollup rows, agreeing exactly", records, groups)
}

// TestStagingTableRecreated drops the staging table of every pooled
// connection (as a connection reset or a pooler handing out another server
// connection would): InsertUsage recreates it and loses nothing.
func TestStagingTableRecreated(t *testing.T) {
	t.Parallel()
	s := openAt(t, storagetest.PostgresDB(t), testSealer(t))
	if err := s.InsertUsage(t.Context(), storagetest.SampleUsage("a", 10)); err != nil {
		t.Fatal(err)
	}
	conns := s.pool.AcquireAllIdle(t.Context())
	if len(conns) == 0 {
		t.Fatal("no idle connection")
	}
	for _, c := range conns {
		if _, err := c.Exec(t.Context(), `DISCARD TEMP`); err != nil {
			t.Fatal(err)
		}
		c.Release()
	}
	if err := s.InsertUsage(t.Context(), storagetest.SampleUsage("b", 10)); err != nil {
		t.Fatalf("InsertUsage after the staging table was dropped: %v", err)
	}
	storagetest.CheckUsage(t, s, append(storagetest.SampleUsage("a", 10), storagetest.SampleUsage("b", 10)...))
}

// TestMigrationBackfillsRollups stores records with the version-1 schema (no
// rollups yet), then opens the store: migration 2 builds usage_hourly from
// them, so the rollups agree with every record.
func TestMigrationBackfillsRollups(t *testing.T) {
	t.Parallel()
	dsn := storagetest.PostgresDB(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v1, err := fs.ReadFile(migrationFiles, "migrations/00001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate.Up(t.Context(), db, goose.DialectPostgres, fstest.MapFS{"00001_init.sql": {Data: v1}}); err != nil {
		t.Fatal(err)
	}
	recs := storagetest.VariedUsage("old", 0, 3000)
	for i := range recs {
		recs[i].Cost = 0 // version 1 has no cost
	}
	for _, r := range recs {
		if _, err := db.Exec(`INSERT INTO usage_records (request_id, at, key_id, account_id, model, status, input_tokens, cached_tokens, output_tokens, reasoning_tokens)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, r.RequestID, r.At, r.KeyID, r.AccountID, r.Model, r.Status,
			r.InputTokens, r.CachedTokens, r.OutputTokens, r.ReasoningTokens); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	s := openAt(t, dsn, testSealer(t))
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
// version 12 kept of them (cost a double precision that InsertUsage never
// added to), and a rollup row whose records were pruned, then opens the
// store: migration 13 makes usage_hourly.cost a bigint of micro-units, each
// group's the sum of its records' cost, and the pruned group's its old value
// in micro-units. Records stored after are added to it.
func TestMigrationRollupCost(t *testing.T) {
	t.Parallel()
	dsn := storagetest.PostgresDB(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrate.Up(t.Context(), db, goose.DialectPostgres, migrationsUpTo(t, 12)); err != nil {
		t.Fatal(err)
	}
	recs := storagetest.VariedUsage("old", 0, 3000)
	for _, r := range recs {
		if _, err := db.Exec(`INSERT INTO usage_records (request_id, at, key_id, account_id, model, status, input_tokens, cached_tokens, output_tokens, reasoning_tokens, cost)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, r.RequestID, r.At, r.KeyID, r.AccountID, r.Model, r.Status,
			r.InputTokens, r.CachedTokens, r.OutputTokens, r.ReasoningTokens, r.Cost); err != nil {
			t.Fatal(err)
		}
	}
	// The rollups as version 12's InsertUsage left them: every cost 0.
	if _, err := db.Exec(`INSERT INTO usage_hourly (hour, key_id, account_id, model, status,
		requests, input_tokens, cached_tokens, output_tokens, reasoning_tokens, cost)
		SELECT date_trunc('hour', at, 'UTC'), key_id, account_id, model, status,
			count(*), sum(input_tokens), sum(cached_tokens), sum(output_tokens), sum(reasoning_tokens), 0
		FROM usage_records GROUP BY 1, 2, 3, 4, 5`); err != nil {
		t.Fatal(err)
	}
	pruned := storage.UsageRollup{Hour: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), KeyID: "gone", Model: "m", Status: 200, Requests: 3, Cost: 250_000}
	if _, err := db.Exec(`INSERT INTO usage_hourly (hour, key_id, account_id, model, status, requests, cost) VALUES ($1, 'gone', '', 'm', 200, 3, 0.25)`,
		pruned.Hour); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := openAt(t, dsn, testSealer(t))
	got, err := s.Rollups(t.Context(), storage.UsageQuery{})
	if err != nil {
		t.Fatal(err)
	}
	storagetest.EqualRollups(t, "rollups after migration 13", got, append([]storage.UsageRollup{pruned}, storagetest.RollupsOf(recs)...))
	var typ, nullable, def string
	if err := s.pool.QueryRow(t.Context(), `SELECT data_type, is_nullable, column_default FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'usage_hourly' AND column_name = 'cost'`).Scan(&typ, &nullable, &def); err != nil {
		t.Fatal(err)
	}
	if typ != "bigint" || nullable != "NO" || def != "0" {
		t.Errorf("usage_hourly.cost: %s, nullable %s, default %s; want bigint NOT NULL DEFAULT 0", typ, nullable, def)
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
	t.Parallel()
	dsn := storagetest.PostgresDB(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v2 := fstest.MapFS{}
	for _, name := range []string{"00001_init.sql", "00002_limits_rollups_settings_policies.sql"} {
		b, err := fs.ReadFile(migrationFiles, "migrations/"+name)
		if err != nil {
			t.Fatal(err)
		}
		v2[name] = &fstest.MapFile{Data: b}
	}
	if err := migrate.Up(t.Context(), db, goose.DialectPostgres, v2); err != nil {
		t.Fatal(err)
	}
	old := storagetest.SampleAPIKey("old")
	if _, err := db.Exec(`INSERT INTO api_keys (id, name, hash, prefix, grp, models, disabled, created_at, rpm)
		VALUES ('key-old', $1, $2, $3, $4, '{gpt-5}', false, now(), 7)`, old.Name, old.Hash, old.Prefix, old.Group); err != nil {
		t.Fatal(err)
	}
	db.Close()
	s := openAt(t, dsn, testSealer(t))
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
