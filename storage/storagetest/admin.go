package storagetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// sampleHash is a syntactically valid argon2id PHC string (storage treats it as opaque).
const sampleHash = "$argon2id$v=19$m=65536,t=1,p=2$c2FsdHNhbHRzYWx0c2FsdA$aGFzaGhhc2hoYXNoaGFzaGhhc2hoYXNoaGFzaGhhc2g"

func testAdminUserRoundTrip(t *testing.T, s storage.Store) {
	if l, err := s.ListAdminUsers(ctx(t)); err != nil || l == nil || len(l) != 0 {
		t.Fatalf("ListAdminUsers on an empty store = %#v, %v; want an empty list", l, err)
	}
	u, err := s.CreateAdminUser(ctx(t), storage.AdminUser{Username: "admin", PasswordHash: sampleHash})
	if err != nil {
		t.Fatal(err)
	}
	if u.ID == "" || u.CreatedAt.IsZero() || !u.UpdatedAt.Equal(u.CreatedAt) || u.LastLoginAt != nil || u.Disabled {
		t.Fatalf("created %+v", u)
	}
	for _, key := range []string{u.ID, "admin"} {
		got, err := s.GetAdminUser(ctx(t), key)
		if err != nil {
			t.Fatalf("GetAdminUser(%q): %v", key, err)
		}
		if got.ID != u.ID || got.Username != "admin" || got.PasswordHash != sampleHash || !got.CreatedAt.Equal(u.CreatedAt) {
			t.Fatalf("GetAdminUser(%q) = %+v, want %+v", key, got, u)
		}
	}
	login := time.Date(2026, 3, 1, 12, 0, 0, 123_000_000, time.UTC)
	u.LastLoginAt = &login
	u.Disabled = true
	u.PasswordHash = sampleHash + "x"
	u.Username = "ignored" // usernames never change
	time.Sleep(2 * time.Millisecond)
	up, err := s.UpdateAdminUser(ctx(t), u)
	if err != nil {
		t.Fatal(err)
	}
	if up.Username != "admin" || !up.Disabled || up.PasswordHash != sampleHash+"x" || up.LastLoginAt == nil ||
		!up.LastLoginAt.Equal(login) || !up.UpdatedAt.After(up.CreatedAt) || !up.CreatedAt.Equal(u.CreatedAt) {
		t.Fatalf("updated %+v", up)
	}
	got, err := s.GetAdminUser(ctx(t), "admin")
	if err != nil || got.UpdatedAt != up.UpdatedAt || !got.LastLoginAt.Equal(login) || !got.Disabled {
		t.Fatalf("read back %+v, %v; want %+v", got, err, up)
	}
	if _, err := s.CreateAdminUser(ctx(t), storage.AdminUser{Username: "Bob", PasswordHash: sampleHash}); err != nil {
		t.Fatal(err)
	}
	l, err := s.ListAdminUsers(ctx(t))
	if err != nil || len(l) != 2 || l[0].Username != "Bob" || l[1].Username != "admin" {
		t.Fatalf("ListAdminUsers = %+v, %v; want Bob, admin (bytewise)", l, err)
	}
	if err := s.DeleteAdminUser(ctx(t), "Bob"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAdminUser(ctx(t), u.ID); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "DeleteAdminUser(gone)", s.DeleteAdminUser(ctx(t), "admin"), storage.ErrNotFound)
	_, err = s.GetAdminUser(ctx(t), "admin")
	wantErr(t, "GetAdminUser(gone)", err, storage.ErrNotFound)
}

func testAdminUserInvalid(t *testing.T, s storage.Store) {
	for _, u := range []storage.AdminUser{
		{Username: "", PasswordHash: sampleHash},
		{Username: " admin", PasswordHash: sampleHash},
		{Username: "a\x00b", PasswordHash: sampleHash},
		{Username: "a\xff", PasswordHash: sampleHash},
		{Username: string(make([]byte, 65)), PasswordHash: sampleHash},
		{Username: "admin", PasswordHash: ""},
		{Username: "admin", PasswordHash: "plaintext-password"},
	} {
		_, err := s.CreateAdminUser(ctx(t), u)
		wantErr(t, fmt.Sprintf("CreateAdminUser(%q)", u.Username), err, storage.ErrInvalid)
	}
	u, err := s.CreateAdminUser(ctx(t), storage.AdminUser{Username: "admin", PasswordHash: sampleHash})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateAdminUser(ctx(t), storage.AdminUser{Username: "admin", PasswordHash: sampleHash})
	wantErr(t, "CreateAdminUser(taken)", err, storage.ErrConflict)
	_, err = s.CreateAdminUser(ctx(t), storage.AdminUser{ID: u.ID, Username: "other", PasswordHash: sampleHash})
	wantErr(t, "CreateAdminUser(taken id)", err, storage.ErrConflict)
	bad := u
	bad.PasswordHash = "x"
	_, err = s.UpdateAdminUser(ctx(t), bad)
	wantErr(t, "UpdateAdminUser(bad hash)", err, storage.ErrInvalid)
	missing := u
	missing.ID = "no-such-id"
	_, err = s.UpdateAdminUser(ctx(t), missing)
	wantErr(t, "UpdateAdminUser(missing)", err, storage.ErrNotFound)
	for _, k := range []string{"", "nobody", "a\x00", "a\xff"} {
		_, err := s.GetAdminUser(ctx(t), k)
		wantErr(t, fmt.Sprintf("GetAdminUser(%q)", k), err, storage.ErrNotFound)
	}
	got, err := s.GetAdminUser(ctx(t), "admin")
	if err != nil || got.PasswordHash != sampleHash {
		t.Fatalf("a refused update changed the user: %+v, %v", got, err)
	}
}

func testUsageRecordLog(t *testing.T, s storage.Store) {
	if l, err := s.ListUsageRecords(ctx(t), storage.UsageRecordQuery{}); err != nil || l != nil {
		t.Fatalf("ListUsageRecords on an empty store = %v, %v; want nil", l, err)
	}
	recs := SampleUsage("log", 250)
	for i := range recs {
		if i%10 == 0 {
			recs[i].Status, recs[i].ErrorClass = 429, "rate"
		}
		if i%3 == 0 {
			recs[i].KeyID = "key-2"
		}
		if i%5 == 0 {
			recs[i].Model = "gpt-4.1"
		}
		if i >= 200 { // same At as record 199: the cursor must break ties by request id
			recs[i].At = recs[199].At
		}
	}
	if err := s.InsertUsage(ctx(t), recs); err != nil {
		t.Fatal(err)
	}
	check := func(what string, q storage.UsageRecordQuery, keep func(storage.UsageRecord) bool) {
		t.Helper()
		checkUsageLog(t, what, usageLogPages(t, s, what, q), recs, keep)
	}
	all := func(storage.UsageRecord) bool { return true }
	check("all, pages of 7", storage.UsageRecordQuery{Limit: 7}, all)
	check("all, default page", storage.UsageRecordQuery{}, all)
	check("key-2", storage.UsageRecordQuery{KeyID: "key-2", Limit: 13}, func(r storage.UsageRecord) bool { return r.KeyID == "key-2" })
	check("failed", storage.UsageRecordQuery{FailedOnly: true, Limit: 4}, func(r storage.UsageRecord) bool { return r.Status >= 400 })
	check("status 200 gpt-4.1", storage.UsageRecordQuery{Status: 200, Model: "gpt-4.1"}, func(r storage.UsageRecord) bool {
		return r.Status == 200 && r.Model == "gpt-4.1"
	})
	from, to := recs[50].At, recs[100].At
	check("time range", storage.UsageRecordQuery{From: from, To: to, Limit: 9}, func(r storage.UsageRecord) bool {
		return !r.At.Before(from) && r.At.Before(to)
	})
	check("no such account", storage.UsageRecordQuery{AccountID: "nobody"}, func(storage.UsageRecord) bool { return false })
	if l, err := s.ListUsageRecords(ctx(t), storage.UsageRecordQuery{Limit: 5000}); err != nil || len(l) != 250 {
		t.Fatalf("limit above the cap: %d, %v", len(l), err)
	}
}

// usageLogPages reads every page of the request log that q selects,
// following the cursor from page to page.
func usageLogPages(t *testing.T, s storage.Store, what string, q storage.UsageRecordQuery) []storage.UsageRecord {
	t.Helper()
	var got []storage.UsageRecord
	for page := 0; ; page++ {
		l, err := s.ListUsageRecords(ctx(t), q)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(l) > q.PageLimit() {
			t.Fatalf("%s: page of %d > limit %d", what, len(l), q.PageLimit())
		}
		if len(l) == 0 {
			return got
		}
		got = append(got, l...)
		last := l[len(l)-1]
		q.After = storage.UsageCursor{At: last.At, RequestID: last.RequestID}
		if page > 300 {
			t.Fatalf("%s: paging does not end", what)
		}
	}
}

// checkUsageLog checks that got holds each record of recs that keep
// accepts, once, as it was stored, newest first (ties by request id), and
// nothing else.
func checkUsageLog(t *testing.T, what string, got, recs []storage.UsageRecord, keep func(storage.UsageRecord) bool) {
	t.Helper()
	byID := map[string]storage.UsageRecord{}
	want := 0
	for _, r := range recs {
		byID[r.RequestID] = r
		if keep(r) {
			want++
		}
	}
	if len(got) != want {
		t.Fatalf("%s: %d records, want %d", what, len(got), want)
	}
	seen := map[string]bool{}
	for i, r := range got {
		w, ok := byID[r.RequestID]
		if !ok || seen[r.RequestID] || !keep(w) {
			t.Fatalf("%s: unexpected or repeated record %q", what, r.RequestID)
		}
		seen[r.RequestID] = true
		if !r.At.Equal(w.At) || r.Model != w.Model || r.KeyID != w.KeyID || r.Status != w.Status || r.Latency != w.Latency ||
			r.TTFT != w.TTFT || r.InputTokens != w.InputTokens || r.Stream != w.Stream || r.Attempts != w.Attempts || r.ErrorClass != w.ErrorClass {
			t.Fatalf("%s: record %q = %+v, want %+v", what, r.RequestID, r, w)
		}
		if i > 0 {
			p := got[i-1]
			if p.At.Before(r.At) || (p.At.Equal(r.At) && p.RequestID < r.RequestID) {
				t.Fatalf("%s: not newest first at %d: %q then %q", what, i, p.RequestID, r.RequestID)
			}
		}
	}
}
