package storagetest

import (
	"errors"
	"testing"

	"github.com/troupe-gw/troupe/storage"
)

// testConditionalWrites: a write conditional on the version read
// (Account.IfVersion, User.IfUpdatedAt, APIKey.IfRevision) applies when
// the record is still at it, and otherwise fails with storage.ErrStale and
// writes nothing: two admins who read the same record, on two instances,
// cannot both write it; the second learns that it changed. A deleted
// account is stale too; a missing user or key stays ErrNotFound.
func testConditionalWrites(t *testing.T, s storage.Store) {
	a, err := s.PutAccount(ctx(t), SampleAccount("cond"))
	if err != nil {
		t.Fatal(err)
	}
	first := a
	first.Priority, first.IfVersion = 1, a.Version
	got, err := s.PutAccount(ctx(t), first)
	if err != nil || got.Priority != 1 || got.Version <= a.Version {
		t.Fatalf("conditional put at the version read = %+v, %v", got, err)
	}
	second := a
	second.Priority, second.IfVersion = 2, a.Version // read before the first write
	if _, err := s.PutAccount(ctx(t), second); !errors.Is(err, storage.ErrStale) {
		t.Fatalf("conditional put at an old version: %v, want ErrStale", err)
	}
	if cur, err := s.GetAccount(ctx(t), a.ID); err != nil || cur.Priority != 1 {
		t.Fatalf("after the stale put: %+v, %v; want priority 1 kept", cur, err)
	}
	gone := SampleAccount("never-stored")
	gone.IfVersion = 7
	if _, err := s.PutAccount(ctx(t), gone); !errors.Is(err, storage.ErrStale) {
		t.Fatalf("conditional put of an account that is not stored: %v, want ErrStale", err)
	}

	u, err := s.CreateUser(ctx(t), storage.User{Name: "cond"}, storage.NewUser{})
	if err != nil {
		t.Fatal(err)
	}
	u1 := u
	u1.RPM, u1.IfUpdatedAt = 10, u.UpdatedAt
	got1, err := s.UpdateUser(ctx(t), u1)
	if err != nil || got1.RPM != 10 || !got1.UpdatedAt.After(u.UpdatedAt) {
		t.Fatalf("conditional user update at the time read = %+v, %v", got1, err)
	}
	u2 := u
	u2.RPM, u2.IfUpdatedAt = 20, u.UpdatedAt
	if _, err := s.UpdateUser(ctx(t), u2); !errors.Is(err, storage.ErrStale) {
		t.Fatalf("conditional user update at an old time: %v, want ErrStale", err)
	}
	if cur, err := s.GetUser(ctx(t), u.ID); err != nil || cur.RPM != 10 {
		t.Fatalf("after the stale update: %+v, %v; want rpm 10 kept", cur, err)
	}
	u3 := u2
	u3.ID = "no-such-user"
	if _, err := s.UpdateUser(ctx(t), u3); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("conditional update of a missing user: %v, want ErrNotFound", err)
	}

	k := mustCreateKey(t, s, SampleAPIKey("cond"))
	if k.Revision != 1 {
		t.Fatalf("a new key's revision %d, want 1", k.Revision)
	}
	k1 := k
	k1.Limits.RPM, k1.IfRevision = 5, 0
	gk, err := s.UpdateAPIKey(ctx(t), k1) // unconditional: revision 2
	if err != nil || gk.Revision != 2 {
		t.Fatalf("update = %+v, %v; want revision 2", gk, err)
	}
	k2 := gk
	k2.Limits.RPM, k2.IfRevision = 6, gk.Revision
	if gk, err = s.UpdateAPIKey(ctx(t), k2); err != nil || gk.Revision != 3 || gk.Limits.RPM != 6 {
		t.Fatalf("conditional key update at the revision read = %+v, %v", gk, err)
	}
	k3 := k2 // read at revision 2
	k3.Limits.RPM = 7
	if _, err := s.UpdateAPIKey(ctx(t), k3); !errors.Is(err, storage.ErrStale) {
		t.Fatalf("conditional key update at an old revision: %v, want ErrStale", err)
	}
	if cur, err := s.APIKeyByHash(ctx(t), k.Hash); err != nil || cur.Limits.RPM != 6 || cur.Revision != 3 {
		t.Fatalf("after the stale update: %+v, %v; want rpm 6 at revision 3", cur, err)
	}
	k3.ID = "no-such-key"
	if _, err := s.UpdateAPIKey(ctx(t), k3); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("conditional update of a missing key: %v, want ErrNotFound", err)
	}
}
