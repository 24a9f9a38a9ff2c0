package sqlite

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/troupe-gw/troupe/storage"
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
	// The operator-facing tables and the index exist.
	for _, name := range []string{"accounts", "api_keys", "usage_records", "usage_records_at", "goose_db_version", checksumTable} {
		var n int
		if err := s.r.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = ?`, name).Scan(&n); err != nil || n != 1 {
			t.Errorf("schema object %s: count %d, %v", name, n, err)
		}
	}
	// A migration edited after it was applied is refused.
	if _, err := s.w.Exec(`UPDATE ` + checksumTable + ` SET sha256 = 'deadbeef' WHERE version = 1`); err != nil {
		t.Fatal(err)
	}
	err := Migrate(t.Context(), s.w)
	if err == nil || !strings.Contains(err.Error(), "changed after it was applied") {
		t.Errorf("Migrate with a changed migration: err = %v", err)
	}
}
