// Package storagetest is the conformance suite of the storage contract: every
// backend runs the same tests, so that the embedded and the production
// backends cannot drift apart.
//
// A backend's test calls Run with a function that opens an empty store:
//
//	func TestContract(t *testing.T) {
//		storagetest.Run(t, func(t *testing.T) storage.Store {
//			s, err := Open(ctx, filepath.Join(t.TempDir(), "troupe.db"), sealer)
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// Helpers for backend-specific tests: WriteLoad and CheckUsage (a concurrent
// usage load with retries, and its exact check against RollupsOf), and
// PostgresDB (a fresh PostgreSQL database per test, from TROUPE_TEST_PG_URL).
package storagetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// Run runs the conformance suite as subtests of t. open is called once per
// subtest and must return a new, empty store, closing it itself through
// t.Cleanup. Backends may store times at any precision down to a
// millisecond; the suite requires that what a write returns is what a later
// read returns.
func Run(t *testing.T, open func(t *testing.T) storage.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s storage.Store)
	}{
		{"Accounts/RoundTrip", testAccountRoundTrip},
		{"ConditionalWrites", testConditionalWrites},
		{"Accounts/UpdateByName", testAccountUpdateByName},
		{"Accounts/IDConflicts", testAccountIDConflicts},
		{"Accounts/Invalid", testAccountInvalid},
		{"Accounts/ListOrder", testAccountListOrder},
		{"Accounts/NotFound", testAccountNotFound},
		{"Accounts/Delete", testAccountDelete},
		{"Accounts/IDBeforeName", testAccountIDBeforeName},
		{"Accounts/Feed", testAccountFeed},
		{"Accounts/FeedConcurrent", testAccountFeedConcurrent},
		{"Accounts/FeedPruned", testAccountFeedPruned},
		{"Accounts/FeedConcurrentPruned", testAccountFeedConcurrentPruned},
		{"APIKeys/RoundTrip", testAPIKeyRoundTrip},
		{"APIKeys/Conflicts", testAPIKeyConflicts},
		{"APIKeys/Invalid", testAPIKeyInvalid},
		{"APIKeys/NotFound", testAPIKeyNotFound},
		{"APIKeys/ListAndDelete", testAPIKeyListAndDelete},
		{"APIKeys/Limits", testAPIKeyLimits},
		{"APIKeys/Update", testAPIKeyUpdate},
		{"APIKeys/UpdateConflicts", testAPIKeyUpdateConflicts},
		{"APIKeys/Admin", testAPIKeyAdmin},
		{"APIKeys/Weight", testAPIKeyWeight},
		{"Usage/InsertAndCount", testUsageInsertAndCount},
		{"Usage/AllOrNothing", testUsageAllOrNothing},
		{"Usage/Concurrent", testUsageConcurrent},
		{"Usage/Rollups", testUsageRollups},
		{"Usage/RollupsQuery", testUsageRollupsQuery},
		{"Usage/RollupsSkipDuplicates", testUsageRollupsSkipDuplicates},
		{"Usage/RollupsConcurrentRetries", testUsageRollupsConcurrentRetries},
		{"Usage/RollupsCost", testUsageRollupsCost},
		{"Usage/Prune", testUsagePrune},
		{"Usage/DirtyText", testUsageDirtyText},
		{"RequestLog/Decisions", testRequestLogDecisions},
		{"RequestLog/ErrorEvents", testRequestLogErrorEvents},
		{"RequestLog/Window", testRequestLogWindow},
		{"RequestLog/Series", testRequestLogSeries},
		{"AttemptStats/AddReadPrune", testAttemptStats},
		{"Settings/RoundTrip", testSettingsRoundTrip},
		{"Settings/Invalid", testSettingsInvalid},
		{"Policies/SaveAndHistory", testPolicySaveAndHistory},
		{"Policies/NotFound", testPolicyNotFound},
		{"Policies/ActivateAndRollback", testPolicyActivateAndRollback},
		{"Policies/ConcurrentSave", testPolicyConcurrentSave},
		{"Policies/ConcurrentActivate", testPolicyConcurrentActivate},
		{"Text/Invalid", testTextInvalid},
		{"AdminUsers/RoundTrip", testAdminUserRoundTrip},
		{"AdminUsers/Invalid", testAdminUserInvalid},
		{"Usage/RecordLog", testUsageRecordLog},
		{"Concurrent/Mixed", testConcurrentMixed},
		{"Context/Canceled", testContextCanceled},
	}
	tests = append(tests, tenantTests...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

// ctx returns a context that fails the test rather than hang it.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// SampleAccount returns an account with every field set except ID and the
// timestamps; name makes it unique.
func SampleAccount(name string) storage.Account {
	return storage.Account{
		Name:     name,
		Provider: storage.ProviderCodex,
		BaseURL:  "https://chatgpt.com/backend-api/codex",
		Credentials: storage.Credentials{
			APIKey:       "sk-" + name,
			AccessToken:  "eyJhbGciOi." + name,
			RefreshToken: "rt_" + name,
			IDToken:      "eyJpZCI6." + name,
			AccountID:    "acct-" + name,
		},
		Models:         []string{"gpt-5", "gpt-5-codex"},
		MaxConcurrency: 4,
		Group:          "team-a",
		Tags:           []string{"plus", "eu"},
		Priority:       7,
	}
}

// SampleAPIKey returns an API key named name whose secret is "sk-troupe-"+name.
func SampleAPIKey(name string) storage.APIKey {
	secret := "sk-troupe-" + name + "-0123456789abcdef"
	return storage.APIKey{
		Name:   name,
		Hash:   storage.HashKey(secret),
		Prefix: secret[:12],
		Group:  "team-a",
		Models: []string{"gpt-5"},
		Weight: 1,
	}
}

// SampleUsage returns n usage records with request ids prefix-0 … prefix-(n-1).
func SampleUsage(prefix string, n int) []storage.UsageRecord {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	recs := make([]storage.UsageRecord, n)
	for i := range recs {
		recs[i] = storage.UsageRecord{
			RequestID:       fmt.Sprintf("%s-%d", prefix, i),
			At:              at.Add(time.Duration(i) * time.Millisecond),
			KeyID:           "key-1",
			AccountID:       "acct-1",
			Model:           "gpt-5",
			Route:           "responses",
			Stream:          i%2 == 0,
			Status:          200,
			Attempts:        1,
			Latency:         1500 * time.Millisecond,
			TTFT:            300 * time.Millisecond,
			InputTokens:     1200,
			CachedTokens:    1000,
			OutputTokens:    300,
			ReasoningTokens: 100,
		}
	}
	return recs
}

// equalAccount fails t unless a and b are equal, times compared with Equal.
func equalAccount(t *testing.T, what string, got, want storage.Account) {
	t.Helper()
	if !got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt) {
		t.Errorf("%s: times = %v/%v, want %v/%v", what, got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt)
	}
	got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	got.Version, want.Version = 0, 0 // the feed's, tested by testAccountFeed
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

// equalAPIKey fails t unless got and want are equal, times compared with Equal.
func equalAPIKey(t *testing.T, what string, got, want storage.APIKey) {
	t.Helper()
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("%s: CreatedAt = %v, want %v", what, got.CreatedAt, want.CreatedAt)
	}
	if (got.ExpiresAt == nil) != (want.ExpiresAt == nil) ||
		got.ExpiresAt != nil && !got.ExpiresAt.Equal(*want.ExpiresAt) {
		t.Errorf("%s: ExpiresAt = %v, want %v", what, got.ExpiresAt, want.ExpiresAt)
	}
	got.CreatedAt, want.CreatedAt, got.ExpiresAt, want.ExpiresAt = time.Time{}, time.Time{}, nil, nil
	// Revision counts updates (testConditionalWrites checks it), which the
	// callers' wanted keys do not follow.
	got.Revision, want.Revision = 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func mustPut(t *testing.T, s storage.Store, a storage.Account) storage.Account {
	t.Helper()
	got, err := s.PutAccount(ctx(t), a)
	if err != nil {
		t.Fatalf("PutAccount(%q): %v", a.Name, err)
	}
	return got
}

func mustCreateKey(t *testing.T, s storage.Store, k storage.APIKey) storage.APIKey {
	t.Helper()
	got, err := s.CreateAPIKey(ctx(t), k)
	if err != nil {
		t.Fatalf("CreateAPIKey(%q): %v", k.Name, err)
	}
	return got
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: err = %v, want %v", what, err, target)
	}
}

func testAccountRoundTrip(t *testing.T, s storage.Store) {
	before := time.Now().Add(-time.Second)
	in := SampleAccount("acc-1")
	put := mustPut(t, s, in)
	if put.ID == "" {
		t.Fatal("PutAccount returned an empty ID")
	}
	if put.CreatedAt.Before(before) || put.CreatedAt.After(time.Now().Add(time.Second)) {
		t.Errorf("CreatedAt = %v, want about now", put.CreatedAt)
	}
	if put.UpdatedAt.Before(put.CreatedAt) {
		t.Errorf("UpdatedAt %v before CreatedAt %v", put.UpdatedAt, put.CreatedAt)
	}
	want := in
	want.ID, want.CreatedAt, want.UpdatedAt = put.ID, put.CreatedAt, put.UpdatedAt
	equalAccount(t, "PutAccount result", put, want)

	byID, err := s.GetAccount(ctx(t), put.ID)
	if err != nil {
		t.Fatalf("GetAccount(id): %v", err)
	}
	equalAccount(t, "GetAccount(id)", byID, want)
	byName, err := s.GetAccount(ctx(t), in.Name)
	if err != nil {
		t.Fatalf("GetAccount(name): %v", err)
	}
	equalAccount(t, "GetAccount(name)", byName, want)
	if byName.Credentials != in.Credentials {
		t.Errorf("credentials did not round-trip")
	}

	// Every provider, the zero optional fields and empty lists.
	for i, p := range []storage.Provider{storage.ProviderOpenAI, storage.ProviderOpenAICompat, storage.ProviderAnthropic} {
		a := storage.Account{Name: fmt.Sprintf("min-%d", i), Provider: p, Models: []string{}, Disabled: true}
		a.Credentials.APIKey = "sk-only"
		got := mustPut(t, s, a)
		read, err := s.GetAccount(ctx(t), got.ID)
		if err != nil {
			t.Fatalf("GetAccount: %v", err)
		}
		equalAccount(t, "minimal account", read, got)
		if read.Models != nil || read.Tags != nil || !read.Disabled || read.Provider != p {
			t.Errorf("minimal account read back as %+v", read)
		}
	}
}

func testAccountUpdateByName(t *testing.T, s storage.Store) {
	first := mustPut(t, s, SampleAccount("acc"))

	upd := SampleAccount("acc")
	upd.Provider = storage.ProviderOpenAI
	upd.BaseURL = "https://api.openai.com/v1"
	upd.Credentials = storage.Credentials{APIKey: "sk-rotated"}
	upd.Models = nil
	upd.Tags = []string{"x"}
	upd.MaxConcurrency = 0
	upd.Group = ""
	upd.Priority = -1
	upd.Disabled = true
	got := mustPut(t, s, upd)
	if got.ID != first.ID {
		t.Errorf("update changed ID %q -> %q", first.ID, got.ID)
	}
	if !got.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("update changed CreatedAt %v -> %v", first.CreatedAt, got.CreatedAt)
	}
	if !got.UpdatedAt.After(first.UpdatedAt) {
		t.Errorf("UpdatedAt %v not after %v", got.UpdatedAt, first.UpdatedAt)
	}
	read, err := s.GetAccount(ctx(t), "acc")
	if err != nil {
		t.Fatal(err)
	}
	equalAccount(t, "after update", read, got)
	if read.Credentials != upd.Credentials || read.Provider != storage.ProviderOpenAI || read.Priority != -1 {
		t.Errorf("update not applied: %+v", read)
	}

	// Updating with the ID set (as an admin API would) works too.
	upd.ID = first.ID
	upd.Priority = 3
	if got := mustPut(t, s, upd); got.ID != first.ID || got.Priority != 3 {
		t.Errorf("update with ID: %+v", got)
	}
	// UpdatedAt strictly increases on every write, however fast they come,
	// so that pollers can detect changes by comparing it.
	prev := got.UpdatedAt
	for i := range 20 {
		upd.Priority = i
		got := mustPut(t, s, upd)
		if !got.UpdatedAt.After(prev) {
			t.Fatalf("write %d: UpdatedAt %v not after the previous %v", i, got.UpdatedAt, prev)
		}
		prev = got.UpdatedAt
	}
	list, err := s.ListAccounts(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("ListAccounts has %d accounts after updates, want 1", len(list))
	}
	if !list[0].UpdatedAt.Equal(prev) {
		t.Errorf("listed UpdatedAt %v, want the last write's %v", list[0].UpdatedAt, prev)
	}
}

func testAccountIDConflicts(t *testing.T, s storage.Store) {
	a := mustPut(t, s, SampleAccount("a"))
	b := mustPut(t, s, SampleAccount("b"))

	// Name a with b's ID: the name belongs to another account.
	x := SampleAccount("a")
	x.ID = b.ID
	_, err := s.PutAccount(ctx(t), x)
	wantErr(t, "PutAccount(name of a, id of b)", err, storage.ErrConflict)

	// A new name with a's ID: renames are not supported.
	y := SampleAccount("c")
	y.ID = a.ID
	_, err = s.PutAccount(ctx(t), y)
	wantErr(t, "PutAccount(new name, id of a)", err, storage.ErrConflict)

	// A caller-chosen ID for a new account is kept.
	z := SampleAccount("z")
	z.ID = "my-own-id"
	if got := mustPut(t, s, z); got.ID != "my-own-id" {
		t.Errorf("caller ID not kept: %q", got.ID)
	}

	// Nothing was changed by the refused writes.
	for _, want := range []storage.Account{a, b} {
		got, err := s.GetAccount(ctx(t), want.ID)
		if err != nil {
			t.Fatal(err)
		}
		equalAccount(t, "after refused writes", got, want)
	}
}

func testAccountInvalid(t *testing.T, s storage.Store) {
	for _, a := range []storage.Account{
		{Provider: storage.ProviderOpenAI},
		{Name: "x", Provider: "bogus"},
		{Name: "y"},
	} {
		_, err := s.PutAccount(ctx(t), a)
		wantErr(t, fmt.Sprintf("PutAccount(%q, %q)", a.Name, a.Provider), err, storage.ErrInvalid)
	}
}

func testAccountListOrder(t *testing.T, s storage.Store) {
	list, err := s.ListAccounts(ctx(t))
	if err != nil || len(list) != 0 {
		t.Fatalf("ListAccounts on an empty store = %v, %v", list, err)
	}
	var want []storage.Account
	for _, n := range []string{"c", "a", "B", "b"} {
		a := SampleAccount(n)
		a.Disabled = n == "a"
		want = append(want, mustPut(t, s, a))
	}
	slices.SortFunc(want, func(x, y storage.Account) int { return compareStrings(x.Name, y.Name) })
	list, err = s.ListAccounts(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(want) {
		t.Fatalf("ListAccounts returned %d accounts, want %d", len(list), len(want))
	}
	for i := range want {
		equalAccount(t, fmt.Sprintf("ListAccounts[%d]", i), list[i], want[i])
	}
}

// compareStrings orders by bytes, as SQL's default (binary / "C") collation does.
func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func testAccountNotFound(t *testing.T, s storage.Store) {
	_, err := s.GetAccount(ctx(t), "nope")
	wantErr(t, "GetAccount(missing)", err, storage.ErrNotFound)
	wantErr(t, "DeleteAccount(missing)", s.DeleteAccount(ctx(t), "nope"), storage.ErrNotFound)
	mustPut(t, s, SampleAccount("present"))
	_, err = s.GetAccount(ctx(t), "")
	wantErr(t, "GetAccount(\"\")", err, storage.ErrNotFound)
}

func testAccountDelete(t *testing.T, s storage.Store) {
	a := mustPut(t, s, SampleAccount("a"))
	b := mustPut(t, s, SampleAccount("b"))
	if err := s.DeleteAccount(ctx(t), a.ID); err != nil {
		t.Fatalf("DeleteAccount(id): %v", err)
	}
	if err := s.DeleteAccount(ctx(t), "b"); err != nil {
		t.Fatalf("DeleteAccount(name): %v", err)
	}
	for _, k := range []string{a.ID, "a", b.ID, "b"} {
		_, err := s.GetAccount(ctx(t), k)
		wantErr(t, "GetAccount after delete", err, storage.ErrNotFound)
	}
	wantErr(t, "second DeleteAccount", s.DeleteAccount(ctx(t), a.ID), storage.ErrNotFound)
	// The name is free again.
	c := mustPut(t, s, SampleAccount("a"))
	if c.ID == a.ID {
		t.Errorf("re-created account reused the deleted ID")
	}
}

func testAccountIDBeforeName(t *testing.T, s storage.Store) {
	a := mustPut(t, s, SampleAccount("first"))
	b := mustPut(t, s, SampleAccount(a.ID)) // named like a's ID
	got, err := s.GetAccount(ctx(t), a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != a.ID {
		t.Errorf("GetAccount(%q) matched the name of %q instead of the ID", a.ID, got.Name)
	}
	if err := s.DeleteAccount(ctx(t), a.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetAccount(ctx(t), a.ID); err != nil || got.ID != b.ID {
		t.Errorf("after deleting by ID, GetAccount(%q) = %q, %v; want the account named so", a.ID, got.ID, err)
	}
}

func testAPIKeyRoundTrip(t *testing.T, s storage.Store) {
	exp := time.Now().Add(48 * time.Hour)
	in := SampleAPIKey("alpha")
	in.ExpiresAt = &exp
	got := mustCreateKey(t, s, in)
	if got.ID == "" || got.CreatedAt.IsZero() {
		t.Fatalf("CreateAPIKey did not set ID and CreatedAt: %+v", got)
	}
	if got.ExpiresAt == nil || got.ExpiresAt.Sub(exp).Abs() > time.Millisecond {
		t.Errorf("ExpiresAt = %v, want %v", got.ExpiresAt, exp)
	}
	want := in
	want.ID, want.CreatedAt, want.ExpiresAt = got.ID, got.CreatedAt, got.ExpiresAt
	equalAPIKey(t, "CreateAPIKey result", got, want)

	read, err := s.APIKeyByHash(ctx(t), in.Hash)
	if err != nil {
		t.Fatalf("APIKeyByHash: %v", err)
	}
	equalAPIKey(t, "APIKeyByHash", read, got)

	// A disabled key without expiry or models, with a caller-chosen ID and time.
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	k := storage.APIKey{ID: "key-beta", Name: "beta", Hash: storage.HashKey("sk-troupe-beta"), Disabled: true, CreatedAt: created, Models: []string{}}
	gotK := mustCreateKey(t, s, k)
	if gotK.ID != "key-beta" || !gotK.CreatedAt.Equal(created) {
		t.Errorf("caller ID/CreatedAt not kept: %+v", gotK)
	}
	read, err = s.APIKeyByHash(ctx(t), k.Hash)
	if err != nil {
		t.Fatal(err)
	}
	equalAPIKey(t, "disabled key", read, gotK)
	if !read.Disabled || read.ExpiresAt != nil || read.Models != nil {
		t.Errorf("disabled key read back as %+v", read)
	}
}

func testAPIKeyConflicts(t *testing.T, s storage.Store) {
	a := mustCreateKey(t, s, SampleAPIKey("a"))

	sameName := SampleAPIKey("b")
	sameName.Name = "a"
	_, err := s.CreateAPIKey(ctx(t), sameName)
	wantErr(t, "CreateAPIKey(same name)", err, storage.ErrConflict)

	sameHash := SampleAPIKey("c")
	sameHash.Hash = a.Hash
	_, err = s.CreateAPIKey(ctx(t), sameHash)
	wantErr(t, "CreateAPIKey(same hash)", err, storage.ErrConflict)

	sameID := SampleAPIKey("d")
	sameID.ID = a.ID
	_, err = s.CreateAPIKey(ctx(t), sameID)
	wantErr(t, "CreateAPIKey(same id)", err, storage.ErrConflict)

	list, err := s.ListAPIKeys(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("ListAPIKeys has %d keys after refused creates, want 1", len(list))
	}
}

func testAPIKeyInvalid(t *testing.T, s storage.Store) {
	secret := "sk-troupe-0123456789abcdef0123456789abcdef"
	for what, k := range map[string]storage.APIKey{
		"no name":              {Hash: storage.HashKey(secret)},
		"secret as hash":       {Name: "a", Hash: secret},
		"uppercase hash":       {Name: "b", Hash: "AB" + storage.HashKey(secret)[2:]},
		"prefix is the secret": {Name: "c", Hash: storage.HashKey(secret), Prefix: secret},
	} {
		_, err := s.CreateAPIKey(ctx(t), k)
		wantErr(t, "CreateAPIKey("+what+")", err, storage.ErrInvalid)
	}
}

func testAPIKeyNotFound(t *testing.T, s storage.Store) {
	mustCreateKey(t, s, SampleAPIKey("a"))
	_, err := s.APIKeyByHash(ctx(t), storage.HashKey("sk-troupe-unknown"))
	wantErr(t, "APIKeyByHash(unknown)", err, storage.ErrNotFound)
	_, err = s.APIKeyByHash(ctx(t), "")
	wantErr(t, "APIKeyByHash(\"\")", err, storage.ErrNotFound)
	wantErr(t, "DeleteAPIKey(missing)", s.DeleteAPIKey(ctx(t), "missing"), storage.ErrNotFound)
}

func testAPIKeyListAndDelete(t *testing.T, s storage.Store) {
	if l, err := s.ListAPIKeys(ctx(t)); err != nil || len(l) != 0 {
		t.Fatalf("ListAPIKeys on an empty store = %v, %v", l, err)
	}
	var want []storage.APIKey
	for _, n := range []string{"m", "c", "x", "a"} {
		want = append(want, mustCreateKey(t, s, SampleAPIKey(n)))
	}
	slices.SortFunc(want, func(x, y storage.APIKey) int { return compareStrings(x.Name, y.Name) })
	list, err := s.ListAPIKeys(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(want) {
		t.Fatalf("ListAPIKeys returned %d keys, want %d", len(list), len(want))
	}
	for i := range want {
		equalAPIKey(t, fmt.Sprintf("ListAPIKeys[%d]", i), list[i], want[i])
	}

	if err := s.DeleteAPIKey(ctx(t), want[0].ID); err != nil {
		t.Fatalf("DeleteAPIKey(id): %v", err)
	}
	if err := s.DeleteAPIKey(ctx(t), want[1].Name); err != nil {
		t.Fatalf("DeleteAPIKey(name): %v", err)
	}
	for _, k := range want[:2] {
		_, err := s.APIKeyByHash(ctx(t), k.Hash)
		wantErr(t, "APIKeyByHash after delete", err, storage.ErrNotFound)
	}
	wantErr(t, "second DeleteAPIKey", s.DeleteAPIKey(ctx(t), want[0].Name), storage.ErrNotFound)
	if list, _ := s.ListAPIKeys(ctx(t)); len(list) != 2 {
		t.Errorf("ListAPIKeys after 2 deletes has %d keys, want 2", len(list))
	}
}

func count(t *testing.T, s storage.Store) int64 {
	t.Helper()
	n, err := s.CountUsage(ctx(t))
	if err != nil {
		t.Fatalf("CountUsage: %v", err)
	}
	return n
}

func testUsageInsertAndCount(t *testing.T, s storage.Store) {
	if n := count(t, s); n != 0 {
		t.Fatalf("CountUsage on an empty store = %d", n)
	}
	if err := s.InsertUsage(ctx(t), nil); err != nil {
		t.Fatalf("InsertUsage(nil): %v", err)
	}
	if err := s.InsertUsage(ctx(t), SampleUsage("a", 1)); err != nil {
		t.Fatalf("InsertUsage(1): %v", err)
	}
	// A failed request without an account and with zero durations.
	failed := storage.UsageRecord{RequestID: "failed-1", At: time.Now(), KeyID: "k", Status: 503, ErrorClass: "transient", Attempts: 3}
	if err := s.InsertUsage(ctx(t), []storage.UsageRecord{failed}); err != nil {
		t.Fatalf("InsertUsage(failed): %v", err)
	}
	if err := s.InsertUsage(ctx(t), SampleUsage("b", 500)); err != nil {
		t.Fatalf("InsertUsage(500): %v", err)
	}
	if n := count(t, s); n != 502 {
		t.Errorf("CountUsage = %d, want 502", n)
	}
}

func testUsageAllOrNothing(t *testing.T, s storage.Store) {
	if err := s.InsertUsage(ctx(t), SampleUsage("a", 10)); err != nil {
		t.Fatal(err)
	}
	// A record without request id refuses the whole batch.
	batch := SampleUsage("d", 10)
	batch[5].RequestID = ""
	wantErr(t, "InsertUsage(no request id)", s.InsertUsage(ctx(t), batch), storage.ErrInvalid)
	if n := count(t, s); n != 10 {
		t.Errorf("CountUsage = %d after a refused batch, want 10", n)
	}
	// Duplicates (within a batch, or of stored records) are skipped: a retried
	// batch must not double the usage.
	batch = SampleUsage("b", 10)
	batch[9].RequestID = batch[3].RequestID
	if err := s.InsertUsage(ctx(t), batch); err != nil {
		t.Fatalf("InsertUsage(duplicate within batch): %v", err)
	}
	if err := s.InsertUsage(ctx(t), append(SampleUsage("c", 10), SampleUsage("a", 10)...)); err != nil {
		t.Fatalf("InsertUsage(retried records): %v", err)
	}
	if n := count(t, s); n != 29 {
		t.Errorf("CountUsage = %d, want 29 (duplicates skipped)", n)
	}
}

func testUsageConcurrent(t *testing.T, s storage.Store) {
	const goroutines, batches, size = 50, 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*batches)
	for g := range goroutines {
		wg.Go(func() {
			for b := range batches {
				if err := s.InsertUsage(ctx(t), SampleUsage(fmt.Sprintf("g%d-b%d", g, b), size)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := count(t, s); n != goroutines*batches*size {
		t.Errorf("CountUsage = %d, want %d", n, goroutines*batches*size)
	}
}

// testConcurrentMixed runs writers and readers of every kind at once.
func testConcurrentMixed(t *testing.T, s storage.Store) {
	key := mustCreateKey(t, s, SampleAPIKey("hot"))
	const workers, rounds = 8, 20
	var wg sync.WaitGroup
	errs := make(chan error, 4*workers*rounds)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				a := SampleAccount(fmt.Sprintf("w%d", w))
				a.Priority = r
				if _, err := s.PutAccount(ctx(t), a); err != nil {
					errs <- err
				}
				if err := s.InsertUsage(ctx(t), SampleUsage(fmt.Sprintf("w%d-r%d", w, r), 5)); err != nil {
					errs <- err
				}
			}
		})
		wg.Go(func() {
			for range rounds {
				if _, err := s.ListAccounts(ctx(t)); err != nil {
					errs <- err
				}
				if _, err := s.APIKeyByHash(ctx(t), key.Hash); err != nil {
					errs <- err
				}
				if _, err := s.CountUsage(ctx(t)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	list, err := s.ListAccounts(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != workers {
		t.Errorf("ListAccounts has %d accounts, want %d", len(list), workers)
	}
	for _, a := range list {
		if a.Priority != rounds-1 {
			t.Errorf("account %s has priority %d, want the last write %d", a.Name, a.Priority, rounds-1)
		}
	}
	if n := count(t, s); n != workers*rounds*5 {
		t.Errorf("CountUsage = %d, want %d", n, workers*rounds*5)
	}
}

func testContextCanceled(t *testing.T, s storage.Store) {
	mustPut(t, s, SampleAccount("a"))
	c, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.ListAccounts(c)
	wantErr(t, "ListAccounts(canceled)", err, context.Canceled)
	_, err = s.GetAccount(c, "a")
	wantErr(t, "GetAccount(canceled)", err, context.Canceled)
	_, err = s.PutAccount(c, SampleAccount("b"))
	wantErr(t, "PutAccount(canceled)", err, context.Canceled)
	_, err = s.APIKeyByHash(c, storage.HashKey("x"))
	wantErr(t, "APIKeyByHash(canceled)", err, context.Canceled)
	wantErr(t, "InsertUsage(canceled)", s.InsertUsage(c, SampleUsage("u", 3)), context.Canceled)
	if n := count(t, s); n != 0 {
		t.Errorf("CountUsage = %d after a canceled insert, want 0", n)
	}
	if _, err := s.GetAccount(ctx(t), "b"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("a canceled PutAccount stored the account: %v", err)
	}
	if r, err := s.Rollups(ctx(t), storage.UsageQuery{}); err != nil || len(r) != 0 {
		t.Errorf("Rollups after a canceled insert = %v, %v; want none", r, err)
	}

	key := mustCreateKey(t, s, SampleAPIKey("k"))
	key.Name = "renamed"
	_, err = s.UpdateAPIKey(c, key)
	wantErr(t, "UpdateAPIKey(canceled)", err, context.Canceled)
	_, err = s.Rollups(c, storage.UsageQuery{})
	wantErr(t, "Rollups(canceled)", err, context.Canceled)
	_, _, err = s.PruneUsage(c, time.Now(), time.Now())
	wantErr(t, "PruneUsage(canceled)", err, context.Canceled)
	wantErr(t, "PutSetting(canceled)", s.PutSetting(c, "k", "v"), context.Canceled)
	_, err = s.GetSetting(c, "k")
	wantErr(t, "GetSetting(canceled)", err, context.Canceled)
	_, err = s.ListSettings(c)
	wantErr(t, "ListSettings(canceled)", err, context.Canceled)
	_, err = s.SavePolicy(c, "p", "return 1")
	wantErr(t, "SavePolicy(canceled)", err, context.Canceled)
	_, err = s.ActivatePolicy(c, "p", 0)
	wantErr(t, "ActivatePolicy(canceled)", err, context.Canceled)
	_, err = s.ActivePolicy(c)
	wantErr(t, "ActivePolicy(canceled)", err, context.Canceled)
	_, err = s.ListPolicies(c)
	wantErr(t, "ListPolicies(canceled)", err, context.Canceled)

	if got, err := s.APIKeyByHash(ctx(t), key.Hash); err != nil || got.Name != "k" {
		t.Errorf("a canceled UpdateAPIKey changed the key: %+v, %v", got, err)
	}
	if _, err := s.GetSetting(ctx(t), "k"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("a canceled PutSetting stored the setting: %v", err)
	}
	if _, err := s.GetPolicy(ctx(t), "p", 0); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("a canceled SavePolicy stored the policy: %v", err)
	}
}
