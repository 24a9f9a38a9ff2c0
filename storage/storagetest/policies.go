package storagetest

import (
	"fmt"
	"maps"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

func testSettingsRoundTrip(t *testing.T, s storage.Store) {
	_, err := s.GetSetting(ctx(t), storage.SettingUsageRecordsDays)
	wantErr(t, "GetSetting(missing)", err, storage.ErrNotFound)
	if m, err := s.ListSettings(ctx(t)); err != nil || m == nil || len(m) != 0 {
		t.Fatalf("ListSettings on an empty store = %#v, %v; want an empty map", m, err)
	}
	want := map[string]string{
		storage.SettingUsageRecordsDays: "30",
		storage.SettingUsageHourlyDays:  "400",
		"empty":                         "",
		"unicode ключ":                  "значение\n\"quoted\" 'x' \t",
	}
	for k, v := range want {
		if err := s.PutSetting(ctx(t), k, v); err != nil {
			t.Fatalf("PutSetting(%q): %v", k, err)
		}
	}
	// Overwrite.
	want[storage.SettingUsageRecordsDays] = "7"
	if err := s.PutSetting(ctx(t), storage.SettingUsageRecordsDays, "7"); err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		got, err := s.GetSetting(ctx(t), k)
		if err != nil || got != v {
			t.Errorf("GetSetting(%q) = %q, %v; want %q", k, got, err, v)
		}
	}
	got, err := s.ListSettings(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("ListSettings = %q, want %q", got, want)
	}
}

func testSettingsInvalid(t *testing.T, s storage.Store) {
	wantErr(t, "PutSetting(empty key)", s.PutSetting(ctx(t), "", "x"), storage.ErrInvalid)
	// Text must be valid UTF-8 without NUL bytes (PostgreSQL cannot store
	// others; every backend refuses them alike).
	wantErr(t, "PutSetting(NUL in value)", s.PutSetting(ctx(t), "k", "a\x00b"), storage.ErrInvalid)
	wantErr(t, "PutSetting(invalid UTF-8 key)", s.PutSetting(ctx(t), "k\xff", "v"), storage.ErrInvalid)
	for _, k := range []string{"", "k", "k\xff", "k\x00"} {
		_, err := s.GetSetting(ctx(t), k)
		wantErr(t, fmt.Sprintf("GetSetting(%q)", k), err, storage.ErrNotFound)
	}
	if m, err := s.ListSettings(ctx(t)); err != nil || len(m) != 0 {
		t.Errorf("ListSettings after refused writes = %q, %v", m, err)
	}
}

// equalPolicy fails t unless got and want are equal, times compared with Equal.
func equalPolicy(t *testing.T, what string, got, want storage.PolicyVersion) {
	t.Helper()
	if !got.CreatedAt.Equal(want.CreatedAt) {
		t.Errorf("%s: CreatedAt = %v, want %v", what, got.CreatedAt, want.CreatedAt)
	}
	if (got.ActivatedAt == nil) != (want.ActivatedAt == nil) ||
		got.ActivatedAt != nil && !got.ActivatedAt.Equal(*want.ActivatedAt) {
		t.Errorf("%s: ActivatedAt = %v, want %v", what, got.ActivatedAt, want.ActivatedAt)
	}
	got.CreatedAt, want.CreatedAt, got.ActivatedAt, want.ActivatedAt = time.Time{}, time.Time{}, nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func mustSavePolicy(t *testing.T, s storage.Store, name, source string) storage.PolicyVersion {
	t.Helper()
	p, err := s.SavePolicy(ctx(t), name, source)
	if err != nil {
		t.Fatalf("SavePolicy(%q): %v", name, err)
	}
	return p
}

func mustActivate(t *testing.T, s storage.Store, name string, v int) storage.PolicyVersion {
	t.Helper()
	p, err := s.ActivatePolicy(ctx(t), name, v)
	if err != nil {
		t.Fatalf("ActivatePolicy(%q, %d): %v", name, v, err)
	}
	return p
}

func testPolicySaveAndHistory(t *testing.T, s storage.Store) {
	if l, err := s.ListPolicies(ctx(t)); err != nil || len(l) != 0 {
		t.Fatalf("ListPolicies on an empty store = %v, %v", l, err)
	}
	before := time.Now().Add(-time.Second)
	var versions []storage.PolicyVersion
	for i := 1; i <= 3; i++ {
		src := fmt.Sprintf("-- v%d\nreturn function(req, accounts) return accounts[%d] end\n", i, i)
		p := mustSavePolicy(t, s, "default", src)
		if p.Name != "default" || p.Version != i || p.Source != src || p.ActivatedAt != nil {
			t.Errorf("SavePolicy #%d = %+v", i, p)
		}
		if p.CreatedAt.Before(before) || p.CreatedAt.After(time.Now().Add(time.Second)) {
			t.Errorf("SavePolicy #%d CreatedAt = %v, want about now", i, p.CreatedAt)
		}
		versions = append(versions, p)
	}
	other := mustSavePolicy(t, s, "Other", "") // an empty source is stored as is
	b := mustSavePolicy(t, s, "b-policy", "return 2")

	for _, p := range versions {
		got, err := s.GetPolicy(ctx(t), "default", p.Version)
		if err != nil {
			t.Fatalf("GetPolicy(default, %d): %v", p.Version, err)
		}
		equalPolicy(t, fmt.Sprintf("GetPolicy(default, %d)", p.Version), got, p)
	}
	for _, v := range []int{0, -1} {
		got, err := s.GetPolicy(ctx(t), "default", v)
		if err != nil {
			t.Fatal(err)
		}
		equalPolicy(t, fmt.Sprintf("GetPolicy(default, %d)", v), got, versions[2])
	}
	hist, err := s.PolicyHistory(ctx(t), "default")
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 3 {
		t.Fatalf("PolicyHistory has %d versions, want 3", len(hist))
	}
	for i, p := range hist {
		equalPolicy(t, fmt.Sprintf("PolicyHistory[%d]", i), p, versions[2-i])
	}
	list, err := s.ListPolicies(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []storage.PolicyVersion{other, b, versions[2]} // bytewise: "Other" < "b-policy" < "default"
	if len(list) != len(want) {
		t.Fatalf("ListPolicies = %d policies, want %d", len(list), len(want))
	}
	for i := range want {
		equalPolicy(t, fmt.Sprintf("ListPolicies[%d]", i), list[i], want[i])
	}
	_, err = s.SavePolicy(ctx(t), "", "return 1")
	wantErr(t, "SavePolicy(empty name)", err, storage.ErrInvalid)
	_, err = s.SavePolicy(ctx(t), "default", "return '\x00'")
	wantErr(t, "SavePolicy(NUL in source)", err, storage.ErrInvalid)
	_, err = s.SavePolicy(ctx(t), "bad\xff", "return 1")
	wantErr(t, "SavePolicy(invalid UTF-8 name)", err, storage.ErrInvalid)
	if p, err := s.GetPolicy(ctx(t), "default", 0); err != nil || p.Version != 3 {
		t.Errorf("after refused saves, latest = %+v, %v; want version 3", p, err)
	}
	for _, n := range []string{"bad\xff", "bad\x00"} {
		_, err = s.GetPolicy(ctx(t), n, 0)
		wantErr(t, fmt.Sprintf("GetPolicy(%q)", n), err, storage.ErrNotFound)
		_, err = s.PolicyHistory(ctx(t), n)
		wantErr(t, fmt.Sprintf("PolicyHistory(%q)", n), err, storage.ErrNotFound)
		_, err = s.ActivatePolicy(ctx(t), n, 0)
		wantErr(t, fmt.Sprintf("ActivatePolicy(%q)", n), err, storage.ErrNotFound)
	}
}

func testPolicyNotFound(t *testing.T, s storage.Store) {
	_, err := s.GetPolicy(ctx(t), "nope", 0)
	wantErr(t, "GetPolicy(missing)", err, storage.ErrNotFound)
	_, err = s.PolicyHistory(ctx(t), "nope")
	wantErr(t, "PolicyHistory(missing)", err, storage.ErrNotFound)
	_, err = s.ActivePolicy(ctx(t))
	wantErr(t, "ActivePolicy(none)", err, storage.ErrNotFound)
	_, err = s.ActivatePolicy(ctx(t), "nope", 0)
	wantErr(t, "ActivatePolicy(missing)", err, storage.ErrNotFound)

	mustSavePolicy(t, s, "p", "return 1")
	_, err = s.GetPolicy(ctx(t), "p", 2)
	wantErr(t, "GetPolicy(missing version)", err, storage.ErrNotFound)
	_, err = s.ActivatePolicy(ctx(t), "p", 2)
	wantErr(t, "ActivatePolicy(missing version)", err, storage.ErrNotFound)
	_, err = s.ActivePolicy(ctx(t))
	wantErr(t, "ActivePolicy(after refused activations)", err, storage.ErrNotFound)
	if p, err := s.GetPolicy(ctx(t), "p", 1); err != nil || p.ActivatedAt != nil {
		t.Errorf("a refused activation stamped version 1: %+v, %v", p, err)
	}
}

func testPolicyActivateAndRollback(t *testing.T, s storage.Store) {
	v1 := mustSavePolicy(t, s, "default", "return 1")
	v2 := mustSavePolicy(t, s, "default", "return 2")
	v3 := mustSavePolicy(t, s, "default", "return 3")
	alt := mustSavePolicy(t, s, "alt", "return 'alt'")

	// Activate the latest.
	before := time.Now().Add(-time.Second)
	a3 := mustActivate(t, s, "default", 0)
	if a3.Version != 3 || a3.Source != v3.Source || a3.ActivatedAt == nil ||
		a3.ActivatedAt.Before(before) || a3.ActivatedAt.After(time.Now().Add(time.Second)) {
		t.Fatalf("ActivatePolicy(default, latest) = %+v", a3)
	}
	active, err := s.ActivePolicy(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	equalPolicy(t, "ActivePolicy after activating v3", active, a3)

	// Roll back: activate v1. v3 keeps its ActivatedAt (when it last became
	// active), v2 was never active.
	time.Sleep(2 * time.Millisecond)
	a1 := mustActivate(t, s, "default", 1)
	if a1.Version != 1 || a1.Source != v1.Source || a1.ActivatedAt == nil || !a1.ActivatedAt.After(*a3.ActivatedAt) {
		t.Fatalf("ActivatePolicy(default, 1) = %+v (v3 activated at %v)", a1, a3.ActivatedAt)
	}
	active, err = s.ActivePolicy(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	equalPolicy(t, "ActivePolicy after rollback", active, a1)
	hist, err := s.PolicyHistory(ctx(t), "default")
	if err != nil || len(hist) != 3 {
		t.Fatalf("PolicyHistory = %v, %v", hist, err)
	}
	equalPolicy(t, "history v3", hist[0], a3)
	equalPolicy(t, "history v2", hist[1], v2)
	equalPolicy(t, "history v1", hist[2], a1)

	// Saving a new version does not activate it.
	v4 := mustSavePolicy(t, s, "default", "return 4")
	if v4.Version != 4 {
		t.Errorf("version after rollback = %d, want 4", v4.Version)
	}
	active, _ = s.ActivePolicy(ctx(t))
	equalPolicy(t, "ActivePolicy after saving v4", active, a1)
	if latest, err := s.GetPolicy(ctx(t), "default", 0); err != nil || latest.Version != 4 || latest.ActivatedAt != nil {
		t.Errorf("latest after saving = %+v, %v", latest, err)
	}

	// Another policy replaces the active one.
	aAlt := mustActivate(t, s, "alt", 1)
	active, _ = s.ActivePolicy(ctx(t))
	equalPolicy(t, "ActivePolicy after activating alt", active, aAlt)
	if aAlt.Source != alt.Source {
		t.Errorf("activated alt source %q", aAlt.Source)
	}
	// A refused activation keeps it.
	_, err = s.ActivatePolicy(ctx(t), "default", 99)
	wantErr(t, "ActivatePolicy(missing version)", err, storage.ErrNotFound)
	active, _ = s.ActivePolicy(ctx(t))
	equalPolicy(t, "ActivePolicy after a refused activation", active, aAlt)

	// Back to default v1 again: its ActivatedAt moves on.
	time.Sleep(2 * time.Millisecond)
	again := mustActivate(t, s, "default", 1)
	if !again.ActivatedAt.After(*a1.ActivatedAt) {
		t.Errorf("re-activation ActivatedAt %v not after %v", again.ActivatedAt, a1.ActivatedAt)
	}
	active, _ = s.ActivePolicy(ctx(t))
	equalPolicy(t, "ActivePolicy after re-activating default v1", active, again)
	list, err := s.ListPolicies(ctx(t))
	if err != nil || len(list) != 2 {
		t.Fatalf("ListPolicies = %v, %v", list, err)
	}
	equalPolicy(t, "ListPolicies[alt]", list[0], aAlt)
	equalPolicy(t, "ListPolicies[default]", list[1], v4)
}

func testPolicyConcurrentSave(t *testing.T, s storage.Store) {
	const workers, saves = 8, 5
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[int]string{}
	for w := range workers {
		wg.Go(func() {
			for i := range saves {
				src := fmt.Sprintf("return %d", w*saves+i)
				p, err := s.SavePolicy(ctx(t), "hot", src)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if prev, dup := got[p.Version]; dup {
					t.Errorf("version %d given twice (%q and %q)", p.Version, prev, src)
				}
				got[p.Version] = src
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	hist, err := s.PolicyHistory(ctx(t), "hot")
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != workers*saves {
		t.Fatalf("PolicyHistory has %d versions, want %d", len(hist), workers*saves)
	}
	for i, p := range hist {
		if p.Version != workers*saves-i || p.Source != got[p.Version] {
			t.Errorf("PolicyHistory[%d] = version %d %q, want version %d %q", i, p.Version, p.Source, workers*saves-i, got[workers*saves-i])
		}
	}
}

func testPolicyConcurrentActivate(t *testing.T, s storage.Store) {
	const policies, rounds = 6, 5
	for i := range policies {
		mustSavePolicy(t, s, fmt.Sprintf("p%d", i), "return 1")
		mustSavePolicy(t, s, fmt.Sprintf("p%d", i), "return 2")
	}
	var wg sync.WaitGroup
	for i := range policies {
		wg.Go(func() {
			for r := range rounds {
				if _, err := s.ActivatePolicy(ctx(t), fmt.Sprintf("p%d", i), 1+r%2); err != nil {
					t.Errorf("ActivatePolicy: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	// One version is active (backends guarantee at most one with a unique index).
	active, err := s.ActivePolicy(ctx(t))
	if err != nil {
		t.Fatalf("ActivePolicy: %v", err)
	}
	if active.ActivatedAt == nil {
		t.Errorf("active policy without ActivatedAt: %+v", active)
	}
}
