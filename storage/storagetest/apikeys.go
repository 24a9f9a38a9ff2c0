package storagetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

func testAPIKeyLimits(t *testing.T, s storage.Store) {
	in := SampleAPIKey("limited")
	in.Limits = storage.KeyLimits{RPM: 60, RPD: 10000, TokensPerDay: 5_000_000_000} // beyond 32 bits
	got := mustCreateKey(t, s, in)
	if got.Limits != in.Limits {
		t.Errorf("CreateAPIKey returned limits %+v, want %+v", got.Limits, in.Limits)
	}
	read, err := s.APIKeyByHash(ctx(t), in.Hash)
	if err != nil {
		t.Fatal(err)
	}
	equalAPIKey(t, "APIKeyByHash", read, got)
	list, err := s.ListAPIKeys(ctx(t))
	if err != nil || len(list) != 1 {
		t.Fatalf("ListAPIKeys = %v, %v", list, err)
	}
	equalAPIKey(t, "ListAPIKeys", list[0], got)

	// Zero limits (unlimited) round-trip as zero.
	free := mustCreateKey(t, s, SampleAPIKey("free"))
	if read, err := s.APIKeyByHash(ctx(t), free.Hash); err != nil || read.Limits != (storage.KeyLimits{}) {
		t.Errorf("unlimited key read back with %+v, %v", read.Limits, err)
	}

	for _, l := range []storage.KeyLimits{{RPM: -1}, {RPD: -1}, {TokensPerDay: -5}} {
		k := SampleAPIKey(fmt.Sprintf("neg-%d-%d-%d", l.RPM, l.RPD, l.TokensPerDay))
		k.Limits = l
		_, err := s.CreateAPIKey(ctx(t), k)
		wantErr(t, fmt.Sprintf("CreateAPIKey(limits %+v)", l), err, storage.ErrInvalid)
	}
}

func testAPIKeyUpdate(t *testing.T, s storage.Store) {
	exp := time.Now().Add(time.Hour)
	in := SampleAPIKey("orig")
	in.ExpiresAt = &exp
	in.Limits = storage.KeyLimits{RPM: 10}
	orig := mustCreateKey(t, s, in)
	other := mustCreateKey(t, s, SampleAPIKey("other"))

	upd := orig
	upd.Name = "renamed"
	upd.Group = "team-b"
	upd.Models = []string{"gpt-5-mini", "claude-sonnet"}
	upd.Disabled = true
	upd.ExpiresAt = nil
	upd.Limits = storage.KeyLimits{RPM: 1, RPD: 2, TokensPerDay: 3}
	upd.Admin = true
	// Hash, Prefix and CreatedAt cannot be changed through an update.
	upd.Hash = storage.HashKey("sk-troupe-someone-else")
	upd.Prefix = "sk-troupe-xx"
	upd.CreatedAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	got, err := s.UpdateAPIKey(ctx(t), upd)
	if err != nil {
		t.Fatalf("UpdateAPIKey: %v", err)
	}
	want := upd
	want.Hash, want.Prefix, want.CreatedAt = orig.Hash, orig.Prefix, orig.CreatedAt
	equalAPIKey(t, "UpdateAPIKey result", got, want)
	read, err := s.APIKeyByHash(ctx(t), orig.Hash)
	if err != nil {
		t.Fatalf("APIKeyByHash after update: %v", err)
	}
	equalAPIKey(t, "APIKeyByHash after update", read, want)
	if _, err := s.APIKeyByHash(ctx(t), upd.Hash); err == nil {
		t.Error("the hash given to UpdateAPIKey was stored")
	}

	// Setting an expiry and clearing the lists and limits again.
	exp2 := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	upd = read
	upd.ExpiresAt = &exp2
	upd.Models = nil
	upd.Group = ""
	upd.Disabled = false
	upd.Limits = storage.KeyLimits{}
	upd.Admin = false
	got, err = s.UpdateAPIKey(ctx(t), upd)
	if err != nil {
		t.Fatal(err)
	}
	equalAPIKey(t, "second update", got, upd)
	list, err := s.ListAPIKeys(ctx(t))
	if err != nil || len(list) != 2 {
		t.Fatalf("ListAPIKeys = %v, %v", list, err)
	}
	equalAPIKey(t, "listed other", list[0], other) // "other" < "renamed"
	equalAPIKey(t, "listed updated", list[1], upd)

	// The old name is free again.
	again := SampleAPIKey("orig-2")
	again.Name = "orig"
	mustCreateKey(t, s, again)
}

// testAPIKeyAdmin checks that Admin round-trips through CreateAPIKey,
// APIKeyByHash, ListAPIKeys and UpdateAPIKey (which may grant and revoke
// it), that it defaults to false, and that an update of other fields keeps
// it.
func testAPIKeyAdmin(t *testing.T, s storage.Store) {
	in := SampleAPIKey("ops")
	in.Admin = true
	ops := mustCreateKey(t, s, in)
	if !ops.Admin {
		t.Errorf("CreateAPIKey(Admin: true) returned Admin false: %+v", ops)
	}
	app := mustCreateKey(t, s, SampleAPIKey("app"))
	if app.Admin {
		t.Errorf("CreateAPIKey(Admin: false) returned Admin true: %+v", app)
	}
	for _, want := range []storage.APIKey{ops, app} {
		read, err := s.APIKeyByHash(ctx(t), want.Hash)
		if err != nil {
			t.Fatalf("APIKeyByHash(%s): %v", want.Name, err)
		}
		if read.Admin != want.Admin {
			t.Errorf("APIKeyByHash(%s).Admin = %v, want %v", want.Name, read.Admin, want.Admin)
		}
		equalAPIKey(t, "APIKeyByHash("+want.Name+")", read, want)
	}
	checkList := func(what string, want ...storage.APIKey) {
		t.Helper()
		list, err := s.ListAPIKeys(ctx(t))
		if err != nil || len(list) != len(want) {
			t.Fatalf("%s: ListAPIKeys = %v, %v", what, list, err)
		}
		for i := range want {
			if list[i].Admin != want[i].Admin {
				t.Errorf("%s: ListAPIKeys[%d] (%s).Admin = %v, want %v", what, i, list[i].Name, list[i].Admin, want[i].Admin)
			}
			equalAPIKey(t, fmt.Sprintf("%s: ListAPIKeys[%d]", what, i), list[i], want[i])
		}
	}
	checkList("after create", app, ops) // "app" < "ops"

	// Granting and revoking through UpdateAPIKey.
	grant := app
	grant.Admin = true
	granted, err := s.UpdateAPIKey(ctx(t), grant)
	if err != nil {
		t.Fatalf("UpdateAPIKey(grant admin): %v", err)
	}
	equalAPIKey(t, "UpdateAPIKey(grant admin) result", granted, grant)
	revoke := ops
	revoke.Admin = false
	revoked, err := s.UpdateAPIKey(ctx(t), revoke)
	if err != nil {
		t.Fatalf("UpdateAPIKey(revoke admin): %v", err)
	}
	equalAPIKey(t, "UpdateAPIKey(revoke admin) result", revoked, revoke)
	for _, want := range []storage.APIKey{granted, revoked} {
		read, err := s.APIKeyByHash(ctx(t), want.Hash)
		if err != nil {
			t.Fatal(err)
		}
		equalAPIKey(t, "APIKeyByHash after update ("+want.Name+")", read, want)
	}
	checkList("after update", granted, revoked)

	// Changing other fields keeps Admin as given (here: still true).
	renamed := granted
	renamed.Name = "app-2"
	renamed.Limits.RPM = 30
	got, err := s.UpdateAPIKey(ctx(t), renamed)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Admin {
		t.Errorf("an update of name and limits dropped Admin: %+v", got)
	}
	checkList("after rename", renamed, revoked)
}

func testAPIKeyUpdateConflicts(t *testing.T, s storage.Store) {
	a := mustCreateKey(t, s, SampleAPIKey("a"))
	b := mustCreateKey(t, s, SampleAPIKey("b"))

	x := a
	x.Name = "b"
	_, err := s.UpdateAPIKey(ctx(t), x)
	wantErr(t, "UpdateAPIKey(name of another key)", err, storage.ErrConflict)

	missing := a
	missing.ID = "no-such-id"
	missing.Name = "c"
	_, err = s.UpdateAPIKey(ctx(t), missing)
	wantErr(t, "UpdateAPIKey(unknown id)", err, storage.ErrNotFound)

	empty := a
	empty.ID = ""
	_, err = s.UpdateAPIKey(ctx(t), empty)
	wantErr(t, "UpdateAPIKey(empty id)", err, storage.ErrNotFound)

	noName := a
	noName.Name = ""
	_, err = s.UpdateAPIKey(ctx(t), noName)
	wantErr(t, "UpdateAPIKey(empty name)", err, storage.ErrInvalid)

	neg := a
	neg.Limits.RPD = -1
	_, err = s.UpdateAPIKey(ctx(t), neg)
	wantErr(t, "UpdateAPIKey(negative limit)", err, storage.ErrInvalid)

	// Keeping its own name is not a conflict.
	same := a
	same.Limits.RPM = 5
	if _, err := s.UpdateAPIKey(ctx(t), same); err != nil {
		t.Errorf("UpdateAPIKey(same name): %v", err)
	}
	// Nothing was changed by the refused updates.
	for _, want := range []storage.APIKey{same, b} {
		got, err := s.APIKeyByHash(ctx(t), want.Hash)
		if err != nil {
			t.Fatal(err)
		}
		equalAPIKey(t, "after refused updates", got, want)
	}
}

// testTextInvalid checks that names and other operator text that is not
// valid UTF-8 or holds a NUL byte (which PostgreSQL cannot store) is refused
// alike by every backend, and that looking such text up finds nothing.
func testTextInvalid(t *testing.T, s storage.Store) {
	for what, mod := range map[string]func(a *storage.Account){
		"NUL in name":         func(a *storage.Account) { a.Name = "a\x00b" },
		"invalid UTF-8 name":  func(a *storage.Account) { a.Name = "a\xffb" },
		"NUL in base URL":     func(a *storage.Account) { a.BaseURL = "https://x\x00" },
		"invalid UTF-8 model": func(a *storage.Account) { a.Models = []string{"ok", "m\xc3"} },
		"NUL in tag":          func(a *storage.Account) { a.Tags = []string{"\x00"} },
		"NUL in id":           func(a *storage.Account) { a.ID = "id\x00" },
		"201-byte group":      func(a *storage.Account) { a.Group = strings.Repeat("g", storage.MaxGroupBytes+1) },
	} {
		a := SampleAccount("acc")
		mod(&a)
		_, err := s.PutAccount(ctx(t), a)
		wantErr(t, "PutAccount("+what+")", err, storage.ErrInvalid)
	}
	for what, mod := range map[string]func(k *storage.APIKey){
		"NUL in name":          func(k *storage.APIKey) { k.Name = "k\x00" },
		"invalid UTF-8 group":  func(k *storage.APIKey) { k.Group = "g\xff" },
		"invalid UTF-8 prefix": func(k *storage.APIKey) { k.Prefix = "sk-\xff" },
		"NUL in model":         func(k *storage.APIKey) { k.Models = []string{"\x00"} },
		"201-byte group":       func(k *storage.APIKey) { k.Group = strings.Repeat("g", storage.MaxGroupBytes+1) },
	} {
		k := SampleAPIKey("key")
		mod(&k)
		_, err := s.CreateAPIKey(ctx(t), k)
		wantErr(t, "CreateAPIKey("+what+")", err, storage.ErrInvalid)
	}
	k := mustCreateKey(t, s, SampleAPIKey("key"))
	bad := k
	bad.Group = "g\x00"
	_, err := s.UpdateAPIKey(ctx(t), bad)
	wantErr(t, "UpdateAPIKey(NUL in group)", err, storage.ErrInvalid)
	bad.Group = strings.Repeat("g", storage.MaxGroupBytes+1)
	_, err = s.UpdateAPIKey(ctx(t), bad)
	wantErr(t, "UpdateAPIKey(201-byte group)", err, storage.ErrInvalid)
	if got, err := s.APIKeyByHash(ctx(t), k.Hash); err != nil || got.Group != k.Group {
		t.Errorf("a refused update changed the key: %+v, %v", got, err)
	}
	if l, err := s.ListAccounts(ctx(t)); err != nil || len(l) != 0 {
		t.Errorf("ListAccounts after refused writes = %d accounts, %v", len(l), err)
	}
	for _, v := range []string{"a\x00b", "a\xffb"} {
		_, err := s.GetAccount(ctx(t), v)
		wantErr(t, fmt.Sprintf("GetAccount(%q)", v), err, storage.ErrNotFound)
		wantErr(t, fmt.Sprintf("DeleteAccount(%q)", v), s.DeleteAccount(ctx(t), v), storage.ErrNotFound)
		wantErr(t, fmt.Sprintf("DeleteAPIKey(%q)", v), s.DeleteAPIKey(ctx(t), v), storage.ErrNotFound)
		_, err = s.APIKeyByHash(ctx(t), v)
		wantErr(t, fmt.Sprintf("APIKeyByHash(%q)", v), err, storage.ErrNotFound)
	}
}
