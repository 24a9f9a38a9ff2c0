package storagetest

import (
	"fmt"
	"maps"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
)

// tenantTests are the conformance tests of storage.Users; Run runs them.
var tenantTests = []struct {
	name string
	fn   func(t *testing.T, s storage.Store)
}{
	{"Users/RoundTrip", testUserRoundTrip},
	{"Users/Invitations", testUserInvitations},
	{"Users/KeysAndDelete", testUserKeysAndDelete},
	{"Billing/BalanceIsLedgerSum", testBalanceIsLedgerSum},
	{"Billing/BalanceLimits", testBalanceLimits},
	{"Billing/RefundOfCharge", testRefundOfCharge},
	{"Billing/ChargeAtomic", testChargeAtomic},
	{"Billing/ManyUsersOneBatch", testManyUsersOneBatch},
	{"Billing/ConcurrentCharges", testConcurrentCharges},
	{"Billing/DailyRollups", testUserDailyRollups},
	{"Billing/PruneDailyRollups", testPruneUserDaily},
	{"Billing/Prices", testPrices},
}

func mustUser(t *testing.T, s storage.Store, name string, balance int64) storage.User {
	t.Helper()
	u, err := s.CreateUser(ctx(t), storage.User{Name: name, Email: name + "@example.com"}, storage.NewUser{Balance: balance, Actor: "test", Note: "start"})
	if err != nil {
		t.Fatalf("CreateUser(%q): %v", name, err)
	}
	return u
}

// checkLedgerSum fails t unless the user's balance is the sum of its ledger
// rows (read page by page) and equals want.
func checkLedgerSum(t *testing.T, s storage.Store, userID string, want int64) {
	t.Helper()
	var (
		sum    int64
		before int64
		rows   int
	)
	for {
		page, err := s.Ledger(ctx(t), storage.LedgerQuery{UserID: userID, Before: before, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			if before > 0 && e.ID >= before {
				t.Fatalf("ledger page not newest first: id %d after %d", e.ID, before)
			}
			sum += e.Amount
			before = e.ID
			rows++
		}
	}
	b, err := s.Balance(ctx(t), userID)
	if err != nil {
		t.Fatal(err)
	}
	if b != sum || b != want {
		t.Fatalf("balance %d, ledger sum %d over %d rows, want %d", b, sum, rows, want)
	}
	all, err := s.Balances(ctx(t))
	if err != nil || all[userID] != b {
		t.Fatalf("Balances()[%q] = %d, %v; want %d", userID, all[userID], err, b)
	}
}

func testUserRoundTrip(t *testing.T, s storage.Store) {
	if l, err := s.ListUsers(ctx(t)); err != nil || l == nil || len(l) != 0 {
		t.Fatalf("ListUsers on an empty store = %#v, %v", l, err)
	}
	in := storage.User{Name: "alice", Email: "alice@example.com", PasswordHash: sampleHash, Group: "vip",
		Models: []string{"gpt-5", "claude-sonnet-4"}, RPM: 60, MaxConcurrency: 3}
	u, err := s.CreateUser(ctx(t), in, storage.NewUser{})
	if err != nil {
		t.Fatal(err)
	}
	if u.ID == "" || u.CreatedAt.IsZero() || !u.UpdatedAt.Equal(u.CreatedAt) || u.LastLoginAt != nil {
		t.Fatalf("created %+v", u)
	}
	for _, key := range []string{u.ID, "alice", "alice@example.com"} {
		got, err := s.GetUser(ctx(t), key)
		if err != nil {
			t.Fatalf("GetUser(%q): %v", key, err)
		}
		if got.ID != u.ID || got.Email != in.Email || got.PasswordHash != sampleHash || got.Group != "vip" || got.RPM != 60 ||
			got.MaxConcurrency != 3 || len(got.Models) != 2 || got.Models[1] != "claude-sonnet-4" || !got.CreatedAt.Equal(u.CreatedAt) {
			t.Fatalf("GetUser(%q) = %+v, want %+v", key, got, u)
		}
	}
	if b, err := s.Balance(ctx(t), u.ID); err != nil || b != 0 {
		t.Fatalf("new user's balance = %d, %v; want 0", b, err)
	}
	_, err = s.CreateUser(ctx(t), storage.User{Name: "alice"}, storage.NewUser{})
	wantErr(t, "a second alice", err, storage.ErrConflict)
	_, err = s.CreateUser(ctx(t), storage.User{Name: "alice2", Email: "alice@example.com"}, storage.NewUser{})
	wantErr(t, "alice's email again", err, storage.ErrConflict)
	for _, bad := range []storage.User{{Name: ""}, {Name: " x"}, {Name: "a@b"}, {Name: "x", Email: "nope"}, {Name: "x", PasswordHash: "plain"},
		{Name: "x", RPM: -1}, {Name: "x", MaxConcurrency: -1}, {Name: "x\x00"}, {Name: "x", Models: []string{"\xff"}}} {
		_, err := s.CreateUser(ctx(t), bad, storage.NewUser{})
		wantErr(t, fmt.Sprintf("CreateUser(%+v)", bad), err, storage.ErrInvalid)
	}
	_, err = s.CreateUser(ctx(t), storage.User{Name: "neg"}, storage.NewUser{Balance: -1})
	wantErr(t, "negative starting balance", err, storage.ErrInvalid)
	if _, err := s.GetUser(ctx(t), "neg"); err == nil {
		t.Fatal("a refused user was stored")
	}
	// Two users without an email: the empty email is not unique.
	mustUser(t, s, "Bob", 0)
	if _, err := s.CreateUser(ctx(t), storage.User{Name: "carol"}, storage.NewUser{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateUser(ctx(t), storage.User{Name: "dave"}, storage.NewUser{}); err != nil {
		t.Fatalf("a second user without email: %v", err)
	}
	l, err := s.ListUsers(ctx(t))
	if err != nil || len(l) != 4 || l[0].Name != "Bob" || l[1].Name != "alice" {
		t.Fatalf("ListUsers = %+v, %v; want Bob, alice, carol, dave", l, err)
	}

	login := time.Date(2026, 3, 1, 12, 0, 0, 123_000_000, time.UTC)
	u.Name, u.Email, u.Disabled, u.Models, u.RPM, u.MaxConcurrency, u.Group, u.LastLoginAt = "alicia", "", true, nil, 0, 0, "", &login
	up, err := s.UpdateUser(ctx(t), u)
	if err != nil {
		t.Fatal(err)
	}
	if up.Name != "alicia" || up.Email != "" || !up.Disabled || up.Models != nil || up.RPM != 0 || !up.LastLoginAt.Equal(login) ||
		!up.UpdatedAt.After(u.UpdatedAt) || !up.CreatedAt.Equal(u.CreatedAt) {
		t.Fatalf("updated %+v", up)
	}
	got, err := s.GetUser(ctx(t), "alicia")
	if err != nil || !got.UpdatedAt.Equal(up.UpdatedAt) || !got.Disabled {
		t.Fatalf("read back %+v, %v; want %+v", got, err, up)
	}
	// A login's time is written alone: the version (UpdatedAt) an admin
	// edits against stays, so a conditional update made against it
	// still applies.
	login2 := login.Add(time.Hour)
	li, err := s.SetUserLastLogin(ctx(t), up.ID, login2)
	if err != nil || li.LastLoginAt == nil || !li.LastLoginAt.Equal(login2) || !li.UpdatedAt.Equal(up.UpdatedAt) || li.Name != "alicia" || !li.Disabled {
		t.Fatalf("SetUserLastLogin = %+v, %v; want last login %v, UpdatedAt %v, the rest unchanged", li, err, login2, up.UpdatedAt)
	}
	if got, err := s.GetUser(ctx(t), up.ID); err != nil || !got.LastLoginAt.Equal(login2) || !got.UpdatedAt.Equal(up.UpdatedAt) {
		t.Fatalf("read back after SetUserLastLogin %+v, %v", got, err)
	}
	edit := li
	edit.RPM, edit.IfUpdatedAt = 7, up.UpdatedAt
	if e, err := s.UpdateUser(ctx(t), edit); err != nil || e.RPM != 7 || !e.LastLoginAt.Equal(login2) {
		t.Fatalf("an edit against the version read before the login: %+v, %v; want it applied", e, err)
	}
	_, err = s.SetUserLastLogin(ctx(t), "nobody", login2)
	wantErr(t, "SetUserLastLogin(nobody)", err, storage.ErrNotFound)
	u, err = s.GetUser(ctx(t), up.ID)
	if err != nil {
		t.Fatal(err)
	}
	u.Name = "Bob"
	_, err = s.UpdateUser(ctx(t), u)
	wantErr(t, "renaming to a taken name", err, storage.ErrConflict)
	_, err = s.UpdateUser(ctx(t), storage.User{ID: "nobody", Name: "x"})
	wantErr(t, "updating a missing user", err, storage.ErrNotFound)
	_, err = s.GetUser(ctx(t), "nobody")
	wantErr(t, "GetUser(nobody)", err, storage.ErrNotFound)
	_, err = s.GetUser(ctx(t), "")
	wantErr(t, "GetUser(\"\")", err, storage.ErrNotFound)
	_, err = s.Balance(ctx(t), "nobody")
	wantErr(t, "Balance(nobody)", err, storage.ErrNotFound)
}

func testUserInvitations(t *testing.T, s storage.Store) {
	code := "inv-0123456789abcdef"
	inv, err := s.CreateInvitation(ctx(t), storage.Invitation{Hash: storage.HashKey(code), Prefix: code[:6], Note: "friends", MaxUses: 2, CreatedBy: "admin:root"})
	if err != nil {
		t.Fatal(err)
	}
	if inv.ID == "" || inv.Uses != 0 || inv.CreatedAt.IsZero() {
		t.Fatalf("created %+v", inv)
	}
	for i, name := range []string{"u1", "u2"} {
		if _, err := s.CreateUser(ctx(t), storage.User{Name: name}, storage.NewUser{Invitation: storage.HashKey(code)}); err != nil {
			t.Fatalf("registration %d with a 2-use code: %v", i+1, err)
		}
	}
	_, err = s.CreateUser(ctx(t), storage.User{Name: "u3"}, storage.NewUser{Invitation: storage.HashKey(code)})
	wantErr(t, "a third use of a 2-use code", err, storage.ErrInvalid)
	if _, err := s.GetUser(ctx(t), "u3"); err == nil {
		t.Fatal("a user refused for its invitation was stored")
	}
	_, err = s.CreateUser(ctx(t), storage.User{Name: "u4"}, storage.NewUser{Invitation: storage.HashKey("no such code")})
	wantErr(t, "an unknown code", err, storage.ErrInvalid)

	// A registration that fails for its name does not use the code up.
	one := "inv-one-0123456789"
	o, err := s.CreateInvitation(ctx(t), storage.Invitation{Hash: storage.HashKey(one), MaxUses: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateUser(ctx(t), storage.User{Name: "u1"}, storage.NewUser{Invitation: storage.HashKey(one)})
	wantErr(t, "a taken name with a good code", err, storage.ErrConflict)
	if _, err := s.CreateUser(ctx(t), storage.User{Name: "u5"}, storage.NewUser{Invitation: storage.HashKey(one)}); err != nil {
		t.Fatalf("the code after a failed registration: %v", err)
	}
	// Concurrent registrations with a 1-use code: exactly one succeeds.
	race := "inv-race-0123456789"
	if _, err := s.CreateInvitation(ctx(t), storage.Invitation{Hash: storage.HashKey(race), MaxUses: 1}); err != nil {
		t.Fatal(err)
	}
	var (
		wg sync.WaitGroup
		mu sync.Mutex
		ok int
	)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.CreateUser(ctx(t), storage.User{Name: fmt.Sprintf("racer-%d", i)}, storage.NewUser{Invitation: storage.HashKey(race)})
			if err == nil {
				mu.Lock()
				ok++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ok != 1 {
		t.Fatalf("%d registrations with a 1-use code, want 1", ok)
	}

	expired := time.Now().Add(-time.Hour)
	if _, err := s.CreateInvitation(ctx(t), storage.Invitation{Hash: storage.HashKey("old-code"), MaxUses: 5, ExpiresAt: &expired}); err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateUser(ctx(t), storage.User{Name: "late"}, storage.NewUser{Invitation: storage.HashKey("old-code")})
	wantErr(t, "an expired code", err, storage.ErrInvalid)
	if err := s.DisableInvitation(ctx(t), inv.ID); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "disabling a missing invitation", s.DisableInvitation(ctx(t), "nope"), storage.ErrNotFound)
	l, err := s.ListInvitations(ctx(t))
	if err != nil || len(l) != 4 {
		t.Fatalf("ListInvitations = %+v, %v; want 4", l, err)
	}
	for _, x := range l {
		switch x.ID {
		case inv.ID:
			if x.Uses != 2 || !x.Disabled || x.Note != "friends" || x.CreatedBy != "admin:root" {
				t.Errorf("the 2-use code reads back %+v", x)
			}
		case o.ID:
			if x.Uses != 1 {
				t.Errorf("the 1-use code has %d uses, want 1", x.Uses)
			}
		}
	}
	_, err = s.CreateInvitation(ctx(t), storage.Invitation{Hash: storage.HashKey(code), MaxUses: 1})
	wantErr(t, "an invitation hash again", err, storage.ErrConflict)
	_, err = s.CreateInvitation(ctx(t), storage.Invitation{Hash: "plain", MaxUses: 1})
	wantErr(t, "a bad hash", err, storage.ErrInvalid)
	_, err = s.CreateInvitation(ctx(t), storage.Invitation{Hash: storage.HashKey("zero"), MaxUses: 0})
	wantErr(t, "0 uses", err, storage.ErrInvalid)
}

func testUserKeysAndDelete(t *testing.T, s storage.Store) {
	u := mustUser(t, s, "owner", 0)
	k := SampleAPIKey("owned")
	k.UserID = u.ID
	got := mustCreateKey(t, s, k)
	if got.UserID != u.ID {
		t.Fatalf("created key's user = %q, want %q", got.UserID, u.ID)
	}
	read, err := s.APIKeyByHash(ctx(t), k.Hash)
	if err != nil || read.UserID != u.ID {
		t.Fatalf("APIKeyByHash: user %q, %v; want %q", read.UserID, err, u.ID)
	}
	op := mustCreateKey(t, s, SampleAPIKey("operator"))
	if op.UserID != "" {
		t.Fatalf("operator key has user %q", op.UserID)
	}
	// Updating a key keeps its owner.
	read.Name = "owned-renamed"
	if up, err := s.UpdateAPIKey(ctx(t), read); err != nil || up.UserID != u.ID {
		t.Fatalf("UpdateAPIKey: user %q, %v", up.UserID, err)
	}
	bad := SampleAPIKey("orphan")
	bad.UserID = "no-such-user"
	_, err = s.CreateAPIKey(ctx(t), bad)
	wantErr(t, "a key of a missing user", err, storage.ErrInvalid)

	// A user without ledger rows is deleted with its keys.
	if err := s.DeleteUser(ctx(t), "owner"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.APIKeyByHash(ctx(t), k.Hash); err == nil {
		t.Fatal("the deleted user's key is still there")
	}
	if _, err := s.APIKeyByHash(ctx(t), op.Hash); err != nil {
		t.Fatalf("the operator key went with the user: %v", err)
	}
	wantErr(t, "deleting again", s.DeleteUser(ctx(t), "owner"), storage.ErrNotFound)
	// A user with ledger rows is kept: disable it instead.
	paid := mustUser(t, s, "paid", 1_000_000)
	wantErr(t, "deleting a user with a ledger", s.DeleteUser(ctx(t), paid.ID), storage.ErrConflict)
	checkLedgerSum(t, s, paid.ID, 1_000_000)
}

func testBalanceIsLedgerSum(t *testing.T, s storage.Store) {
	u := mustUser(t, s, "sum", 5_000_000)
	other := mustUser(t, s, "other", 0)
	entries := []storage.LedgerEntry{
		{UserID: u.ID, Kind: storage.LedgerTopup, Amount: 2_500_000, Actor: "admin:root", Note: "invoice 7"},
		{UserID: u.ID, Kind: storage.LedgerCharge, Amount: -1_234_567, Actor: "gateway", RequestID: "req-a"},
		{UserID: u.ID, Kind: storage.LedgerRefund, Amount: 1_234_567, Actor: "admin:root", Note: "upstream fault", RequestID: "req-a"},
		{UserID: u.ID, Kind: storage.LedgerAdjustment, Amount: -9_000_000, Actor: "cli", Note: "correction"},
		{UserID: other.ID, Kind: storage.LedgerTopup, Amount: 1, Actor: "cli"},
	}
	for _, e := range entries {
		got, err := s.PostLedger(ctx(t), e)
		if err != nil {
			t.Fatalf("PostLedger(%+v): %v", e, err)
		}
		if got.ID == 0 || got.CreatedAt.IsZero() || got.Amount != e.Amount || got.Kind != e.Kind {
			t.Fatalf("PostLedger returned %+v", got)
		}
	}
	// The balance may go below zero (an adjustment, an overdraft).
	checkLedgerSum(t, s, u.ID, 5_000_000+2_500_000-9_000_000)
	checkLedgerSum(t, s, other.ID, 1)
	rows, err := s.Ledger(ctx(t), storage.LedgerQuery{UserID: u.ID})
	if err != nil || len(rows) != 5 || rows[0].Kind != storage.LedgerAdjustment || rows[4].Kind != storage.LedgerTopup ||
		rows[4].Note != "start" || rows[4].Actor != "test" || rows[1].RequestID != "req-a" || rows[3].Note != "invoice 7" {
		t.Fatalf("Ledger = %+v, %v", rows, err)
	}
	for _, bad := range []storage.LedgerEntry{
		{UserID: u.ID, Kind: storage.LedgerTopup, Amount: 0},
		{UserID: u.ID, Kind: storage.LedgerTopup, Amount: -5},
		{UserID: u.ID, Kind: storage.LedgerCharge, Amount: 5},
		{UserID: u.ID, Kind: storage.LedgerRefund, Amount: -5},
		{UserID: u.ID, Kind: storage.LedgerAdjustment, Amount: 0},
		{UserID: u.ID, Kind: "gift", Amount: 5},
		{UserID: "", Kind: storage.LedgerTopup, Amount: 5},
		{UserID: u.ID, Kind: storage.LedgerTopup, Amount: 5, Note: "\xff"},
	} {
		_, err := s.PostLedger(ctx(t), bad)
		wantErr(t, fmt.Sprintf("PostLedger(%+v)", bad), err, storage.ErrInvalid)
	}
	_, err = s.PostLedger(ctx(t), storage.LedgerEntry{UserID: "nobody", Kind: storage.LedgerTopup, Amount: 5})
	wantErr(t, "a top-up of a missing user", err, storage.ErrNotFound)
	checkLedgerSum(t, s, u.ID, -1_500_000)
}

// userUsage returns n usage records of user, costing cost each.
func userUsage(prefix, userID string, n int, cost int64) []storage.UsageRecord {
	recs := SampleUsage(prefix, n)
	for i := range recs {
		recs[i].UserID, recs[i].Cost, recs[i].CacheWriteTokens = userID, cost, 7
	}
	return recs
}

func testChargeAtomic(t *testing.T, s storage.Store) {
	u := mustUser(t, s, "payer", 10_000_000)
	recs := userUsage("pay", u.ID, 5, 123_457)
	recs[2].Cost = 0                                                   // a free request: recorded, not charged
	recs = append(recs, SampleUsage("operator", 2)...)                 // operator keys: never charged
	recs = append(recs, userUsage("ghost", "deleted-user", 1, 999)...) // a user gone meanwhile: stored, not charged
	if err := s.InsertUsage(ctx(t), recs); err != nil {
		t.Fatal(err)
	}
	want := int64(10_000_000 - 4*123_457)
	checkLedgerSum(t, s, u.ID, want)
	// The batch again (a retry after an ambiguous failure, or the journal):
	// no record and no charge twice.
	if err := s.InsertUsage(ctx(t), recs); err != nil {
		t.Fatal(err)
	}
	checkLedgerSum(t, s, u.ID, want)
	rows, err := s.Ledger(ctx(t), storage.LedgerQuery{UserID: u.ID})
	if err != nil {
		t.Fatal(err)
	}
	charged := map[string]int64{}
	for _, e := range rows {
		if e.Kind == storage.LedgerCharge {
			charged[e.RequestID] = e.Amount
		}
	}
	if len(charged) != 4 || charged["pay-0"] != -123_457 || charged["pay-4"] != -123_457 {
		t.Fatalf("charges %v, want pay-0,1,3,4 at -123457", charged)
	}
	// The usage records say what was charged, and whom.
	log, err := s.ListUsageRecords(ctx(t), storage.UsageRecordQuery{UserID: u.ID})
	if err != nil || len(log) != 5 {
		t.Fatalf("ListUsageRecords(user) = %d records, %v; want 5", len(log), err)
	}
	var sum int64
	for _, r := range log {
		if r.UserID != u.ID || r.CacheWriteTokens != 7 {
			t.Fatalf("record %+v", r)
		}
		sum += r.Cost
	}
	if sum != 10_000_000-want {
		t.Fatalf("records' costs sum to %d, the balance fell by %d", sum, 10_000_000-want)
	}
	// A batch that fails (an invalid record) charges nothing.
	bad := userUsage("bad", u.ID, 3, 1_000)
	bad[1].RequestID = ""
	wantErr(t, "a batch with an invalid record", s.InsertUsage(ctx(t), bad), storage.ErrInvalid)
	checkLedgerSum(t, s, u.ID, want)
	// A request is charged at most once, whichever path charges it: a
	// second charge is refused and the balance is untouched.
	_, err = s.PostLedger(ctx(t), storage.LedgerEntry{UserID: u.ID, Kind: storage.LedgerCharge, Amount: -1, RequestID: "pay-0"})
	wantErr(t, "charging pay-0 again", err, storage.ErrConflict)
	checkLedgerSum(t, s, u.ID, want)
	// A record whose request was charged by hand first keeps that charge.
	if _, err := s.PostLedger(ctx(t), storage.LedgerEntry{UserID: u.ID, Kind: storage.LedgerCharge, Amount: -50, RequestID: "manual-0"}); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertUsage(ctx(t), userUsage("manual", u.ID, 1, 70)); err != nil {
		t.Fatalf("a record charged by hand first: %v", err)
	}
	checkLedgerSum(t, s, u.ID, want-50)
}

// testManyUsersOneBatch: a batch of many records of several users, over
// two models and two days, with operator records, a user gone, free
// requests and a request charged by hand first, charges each record as a
// record at a time would: a charge row each of its cost, each balance less
// the sum, each daily rollup the sums of its records. The batch retried,
// and a batch of half stored records, charge only the new ones.
func testManyUsersOneBatch(t *testing.T, s storage.Store) {
	const start = 1_000_000_000
	users := make([]string, 4)
	for i := range users {
		users[i] = mustUser(t, s, fmt.Sprintf("many-%d", i), start).ID
	}
	if _, err := s.PostLedger(ctx(t), storage.LedgerEntry{UserID: users[1], Kind: storage.LedgerCharge, Amount: -50, RequestID: "many-7"}); err != nil {
		t.Fatal(err)
	}
	recs := SampleUsage("many", 600)
	midnight := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	for i := range recs {
		r := &recs[i]
		switch i % 6 {
		case 4:
			r.UserID = "deleted-user" // stored, not charged
		case 5: // an operator key's
		default:
			r.UserID = users[(i/6+i)%len(users)]
		}
		if r.UserID != "" {
			r.Cost = int64(i*37%1000) * 1_000 // some free: recorded, not charged
		}
		r.Model = []string{"gpt-5", "claude-sonnet-4"}[i/5%2]
		r.At = midnight.Add(time.Duration(i-300) * time.Second)
		r.InputTokens, r.CachedTokens, r.OutputTokens = int64(1000+i), int64(i), int64(2*i)
	}
	recs[7].UserID, recs[7].Cost = users[1], 70 // charged by hand first (-50): kept, not doubled
	// want: what a record at a time charges for recs[:n].
	type dayKey struct {
		day         time.Time
		user, model string
	}
	want := func(n int) (map[string]int64, map[string]int64, map[dayKey]storage.UserDaily) {
		spent, charges, daily := map[string]int64{}, map[string]int64{"many-7": -50}, map[dayKey]storage.UserDaily{}
		spent[users[1]] = 50
		for _, r := range recs[:n] {
			if r.UserID == "" || r.UserID == "deleted-user" {
				continue
			}
			if r.Cost > 0 && r.RequestID != "many-7" {
				spent[r.UserID] += r.Cost
				charges[r.RequestID] = -r.Cost
			}
			k := dayKey{r.At.UTC().Truncate(24 * time.Hour), r.UserID, r.Model}
			d := daily[k]
			d.Requests++
			d.InputTokens += r.InputTokens
			d.CachedTokens += r.CachedTokens
			d.OutputTokens += r.OutputTokens
			d.Cost += r.Cost
			daily[k] = d
		}
		return spent, charges, daily
	}
	check := func(n int) {
		t.Helper()
		spent, charges, daily := want(n)
		got := map[string]int64{}
		for _, u := range users {
			checkLedgerSum(t, s, u, start-spent[u])
			rows, err := s.Ledger(ctx(t), storage.LedgerQuery{UserID: u, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rows {
				if e.Kind == storage.LedgerCharge {
					if _, dup := got[e.RequestID]; dup {
						t.Fatalf("request %s charged twice", e.RequestID)
					}
					got[e.RequestID] = e.Amount
				}
			}
		}
		if !maps.Equal(got, charges) {
			t.Fatalf("%d charge rows, want %d (one a record of a user that cost anything)", len(got), len(charges))
		}
		rows, err := s.UserDaily(ctx(t), storage.UserDailyQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(daily) {
			t.Fatalf("%d daily rows, want %d", len(rows), len(daily))
		}
		for _, r := range rows {
			k := dayKey{r.Day.UTC(), r.UserID, r.Model}
			w := daily[k]
			if r.Requests != w.Requests || r.InputTokens != w.InputTokens || r.CachedTokens != w.CachedTokens ||
				r.OutputTokens != w.OutputTokens || r.Cost != w.Cost {
				t.Fatalf("daily %+v, want %+v", r, w)
			}
		}
	}
	if err := s.InsertUsage(ctx(t), recs[:400]); err != nil {
		t.Fatal(err)
	}
	check(400)
	if err := s.InsertUsage(ctx(t), recs[:400]); err != nil { // retried: nothing twice
		t.Fatal(err)
	}
	check(400)
	if err := s.InsertUsage(ctx(t), recs[200:]); err != nil { // half stored already
		t.Fatal(err)
	}
	check(600)
}

func testConcurrentCharges(t *testing.T, s storage.Store) {
	const (
		writers = 6
		batches = 8
		perRec  = 3
		cost    = 1_001
	)
	a := mustUser(t, s, "busy-a", 1_000_000)
	b := mustUser(t, s, "busy-b", 2_000_000)
	var wg sync.WaitGroup
	errs := make(chan error, writers*batches*3)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range batches {
				recs := append(userUsage(fmt.Sprintf("w%d-b%d-a", w, i), a.ID, perRec, cost), userUsage(fmt.Sprintf("w%d-b%d-b", w, i), b.ID, perRec, cost)...)
				if w%2 == 1 { // the other order of users in a batch
					recs = append(recs[perRec:], recs[:perRec]...)
				}
				errs <- s.InsertUsage(ctx(t), recs)
				if i%2 == 0 {
					errs <- s.InsertUsage(ctx(t), recs) // a retried batch, racing others
				}
				_, err := s.PostLedger(ctx(t), storage.LedgerEntry{UserID: a.ID, Kind: storage.LedgerTopup, Amount: 10, Actor: "test"})
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	n := int64(writers * batches * perRec)
	checkLedgerSum(t, s, a.ID, 1_000_000-n*cost+writers*batches*10)
	checkLedgerSum(t, s, b.ID, 2_000_000-n*cost)
}

func testUserDailyRollups(t *testing.T, s storage.Store) {
	u := mustUser(t, s, "daily", 0)
	recs := userUsage("d", u.ID, 4, 10)
	recs[1].At = recs[1].At.Add(24 * time.Hour)
	recs[2].Model = "claude-sonnet-4"
	recs = append(recs, SampleUsage("op", 2)...)
	if err := s.InsertUsage(ctx(t), recs); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertUsage(ctx(t), recs); err != nil { // not counted twice
		t.Fatal(err)
	}
	rows, err := s.UserDaily(ctx(t), storage.UserDailyQuery{UserID: u.ID})
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if len(rows) != 3 {
		t.Fatalf("UserDaily = %+v, want 3 rows", rows)
	}
	want := []storage.UserDaily{
		{Day: day, UserID: u.ID, Model: "claude-sonnet-4", Requests: 1, InputTokens: 1200, CachedTokens: 1000, OutputTokens: 300, Cost: 10},
		{Day: day, UserID: u.ID, Model: "gpt-5", Requests: 2, InputTokens: 2400, CachedTokens: 2000, OutputTokens: 600, Cost: 20},
		{Day: day.Add(24 * time.Hour), UserID: u.ID, Model: "gpt-5", Requests: 1, InputTokens: 1200, CachedTokens: 1000, OutputTokens: 300, Cost: 10},
	}
	for i := range want {
		if !rows[i].Day.Equal(want[i].Day) || rows[i].UserID != want[i].UserID || rows[i].Model != want[i].Model || rows[i].Requests != want[i].Requests ||
			rows[i].InputTokens != want[i].InputTokens || rows[i].CachedTokens != want[i].CachedTokens || rows[i].OutputTokens != want[i].OutputTokens || rows[i].Cost != want[i].Cost {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
	from, err := s.UserDaily(ctx(t), storage.UserDailyQuery{From: day.Add(time.Hour), Model: "gpt-5"})
	if err != nil || len(from) != 1 || !from[0].Day.Equal(day.Add(24*time.Hour)) {
		t.Fatalf("UserDaily from the next day = %+v, %v", from, err)
	}
	to, err := s.UserDaily(ctx(t), storage.UserDailyQuery{To: day.Add(24 * time.Hour)})
	if err != nil || len(to) != 2 {
		t.Fatalf("UserDaily to the next day = %+v, %v", to, err)
	}
}

// testPruneUserDaily: the daily rollups per user and model are pruned by
// day, apart from the request records (each outlives the other's pruning),
// and pruning never touches a balance or its ledger.
func testPruneUserDaily(t *testing.T, s storage.Store) {
	u := mustUser(t, s, "pruned", 1_000_000)
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	recs := userUsage("pd", u.ID, 4, 10)
	for i := range recs {
		recs[i].At = day.Add(time.Duration(i)*24*time.Hour + 2*time.Hour) // days 1 to 4
	}
	if err := s.InsertUsage(ctx(t), recs); err != nil {
		t.Fatal(err)
	}
	days := func() []time.Time {
		t.Helper()
		rows, err := s.UserDaily(ctx(t), storage.UserDailyQuery{UserID: u.ID})
		if err != nil {
			t.Fatal(err)
		}
		var out []time.Time
		for _, r := range rows {
			out = append(out, r.Day)
		}
		return out
	}
	if got := days(); len(got) != 4 {
		t.Fatalf("daily rows before pruning: %v, want 4 days", got)
	}
	if n, err := s.PruneUserDaily(ctx(t), time.Time{}); err != nil || n != 0 {
		t.Fatalf("PruneUserDaily(zero) = %d, %v; want 0, nil", n, err)
	}
	// Records of every day pruned: the rollups stay.
	if _, _, err := s.PruneUsage(ctx(t), day.Add(5*24*time.Hour), time.Time{}); err != nil {
		t.Fatal(err)
	}
	if got := days(); len(got) != 4 {
		t.Fatalf("daily rows after pruning the records: %v, want 4 days", got)
	}
	// A cut at the start of day 3 deletes days 1 and 2, not day 3.
	n, err := s.PruneUserDaily(ctx(t), day.Add(2*24*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("PruneUserDaily(day 3, 00:00) = %d, %v; want 2, nil", n, err)
	}
	got := days()
	if len(got) != 2 || !got[0].Equal(day.Add(2*24*time.Hour)) || !got[1].Equal(day.Add(3*24*time.Hour)) {
		t.Fatalf("daily rows after pruning = %v, want days 3 and 4", got)
	}
	if n, err := s.PruneUserDaily(ctx(t), day.Add(2*24*time.Hour)); err != nil || n != 0 {
		t.Fatalf("second PruneUserDaily = %d, %v; want 0, nil", n, err)
	}
	// A cut inside day 3: a row's time is the start of its day, so day 3 goes.
	if n, err := s.PruneUserDaily(ctx(t), day.Add(2*24*time.Hour+time.Hour)); err != nil || n != 1 {
		t.Fatalf("PruneUserDaily(day 3, 01:00) = %d, %v; want 1, nil", n, err)
	}
	if got := days(); len(got) != 1 || !got[0].Equal(day.Add(3*24*time.Hour)) {
		t.Fatalf("daily rows after the second cut = %v, want day 4", got)
	}
	checkLedgerSum(t, s, u.ID, 1_000_000-4*10)
}

func testPrices(t *testing.T, s storage.Store) {
	if l, err := s.ListPrices(ctx(t)); err != nil || l == nil || len(l) != 0 {
		t.Fatalf("ListPrices on an empty store = %#v, %v", l, err)
	}
	p := storage.Price{Model: "gpt-5", Currency: "USD", Input: 1_250_000, CachedInput: 125_000, CacheWrite: 1_562_500, Output: 10_000_000}
	got, err := s.PutPrice(ctx(t), p)
	if err != nil || got.UpdatedAt.IsZero() {
		t.Fatalf("PutPrice = %+v, %v", got, err)
	}
	p.Output = 12_000_000
	if _, err := s.PutPrice(ctx(t), p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutPrice(ctx(t), storage.Price{Model: "Claude", Currency: "EUR", Input: 3_000_000, Output: 15_000_000}); err != nil {
		t.Fatal(err)
	}
	l, err := s.ListPrices(ctx(t))
	if err != nil || len(l) != 2 || l[0].Model != "Claude" || l[1].Output != 12_000_000 || l[1].CachedInput != 125_000 || l[1].CacheWrite != 1_562_500 || l[0].Currency != "EUR" {
		t.Fatalf("ListPrices = %+v, %v", l, err)
	}
	for _, bad := range []storage.Price{{Model: "", Currency: "USD"}, {Model: "x", Currency: "usd"}, {Model: "x", Currency: "US"}, {Model: "x", Currency: "USD", Input: -1}} {
		_, err := s.PutPrice(ctx(t), bad)
		wantErr(t, fmt.Sprintf("PutPrice(%+v)", bad), err, storage.ErrInvalid)
	}
	if err := s.DeletePrice(ctx(t), "Claude"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "deleting a missing price", s.DeletePrice(ctx(t), "Claude"), storage.ErrNotFound)

	if err := s.PutPriceGroup(ctx(t), storage.PriceGroup{Group: "vip", Multiplier: 800_000}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPriceGroup(ctx(t), storage.PriceGroup{Group: "vip", Multiplier: 750_000}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutPriceGroup(ctx(t), storage.PriceGroup{Group: "A", Multiplier: 2_000_000}); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "a zero multiplier", s.PutPriceGroup(ctx(t), storage.PriceGroup{Group: "z", Multiplier: 0}), storage.ErrInvalid)
	wantErr(t, "a multiplier above x1000", s.PutPriceGroup(ctx(t), storage.PriceGroup{Group: "z", Multiplier: storage.MaxMultiplier + 1}), storage.ErrInvalid)
	g, err := s.ListPriceGroups(ctx(t))
	if err != nil || len(g) != 2 || g[0].Group != "A" || g[1].Multiplier != 750_000 {
		t.Fatalf("ListPriceGroups = %+v, %v", g, err)
	}
	if err := s.DeletePriceGroup(ctx(t), "A"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "deleting a missing group", s.DeletePriceGroup(ctx(t), "A"), storage.ErrNotFound)
}

// testBalanceLimits: an operator's entry never takes a balance beyond
// ±storage.MaxAmount (nor past int64, which SQLite would store as a REAL),
// leaves nothing behind when refused, and a charge is never refused but
// saturates.
func testBalanceLimits(t *testing.T, s storage.Store) {
	u := mustUser(t, s, "rich", storage.MaxAmount-10)
	for _, e := range []storage.LedgerEntry{
		{UserID: u.ID, Kind: storage.LedgerTopup, Amount: 11, Actor: "cli", Note: "over"},
		{UserID: u.ID, Kind: storage.LedgerTopup, Amount: storage.MaxAmount, Actor: "cli", Note: "far over"},
		{UserID: u.ID, Kind: storage.LedgerTopup, Amount: storage.MaxAmount + 1, Actor: "cli", Note: "too large"},
		{UserID: u.ID, Kind: storage.LedgerAdjustment, Amount: -3 * storage.MaxAmount, Actor: "cli", Note: "too large"},
	} {
		_, err := s.PostLedger(ctx(t), e)
		wantErr(t, fmt.Sprintf("PostLedger(%d on %d)", e.Amount, int64(storage.MaxAmount-10)), err, storage.ErrInvalid)
	}
	if _, err := s.PostLedger(ctx(t), storage.LedgerEntry{UserID: u.ID, Kind: storage.LedgerTopup, Amount: 10, Actor: "cli", Note: "to the limit"}); err != nil {
		t.Fatalf("a top-up to exactly MaxAmount: %v", err)
	}
	checkLedgerSum(t, s, u.ID, storage.MaxAmount)
	// Moving back toward zero is always allowed.
	if _, err := s.PostLedger(ctx(t), storage.LedgerEntry{UserID: u.ID, Kind: storage.LedgerAdjustment, Amount: -storage.MaxAmount, Actor: "cli", Note: "back"}); err != nil {
		t.Fatal(err)
	}
	checkLedgerSum(t, s, u.ID, 0)
	wantErr(t, "a starting balance beyond MaxAmount", func() error {
		_, err := s.CreateUser(ctx(t), storage.User{Name: "too-rich"}, storage.NewUser{Balance: storage.MaxAmount + 1, Actor: "test"})
		return err
	}(), storage.ErrInvalid)
	if _, err := s.GetUser(ctx(t), "too-rich"); err == nil {
		t.Fatal("a user refused for its starting balance was stored")
	}
	// A record of absurd cost (an upstream reporting absurd usage) is
	// stored and charged at most MaxAmount: the batch must not fail (its
	// records would be lost) and no sum may overflow.
	debtor := mustUser(t, s, "debtor", 0)
	recs := userUsage("huge", debtor.ID, 3, math.MaxInt64)
	recs[0].InputTokens, recs[1].OutputTokens = math.MaxInt64, -5
	if err := s.InsertUsage(ctx(t), recs); err != nil {
		t.Fatal(err)
	}
	checkLedgerSum(t, s, debtor.ID, -3*storage.MaxAmount)
	log, err := s.ListUsageRecords(ctx(t), storage.UsageRecordQuery{UserID: debtor.ID})
	if err != nil || len(log) != 3 {
		t.Fatalf("ListUsageRecords = %d records, %v", len(log), err)
	}
	for _, r := range log {
		if r.Cost != storage.MaxAmount || r.InputTokens > storage.MaxTokens || r.OutputTokens < 0 {
			t.Fatalf("record stored as %+v", r)
		}
	}
	if _, err := s.Balances(ctx(t)); err != nil {
		t.Fatalf("listing balances with a saturated one: %v", err)
	}
}

// testRefundOfCharge: a refund naming a request refunds that request's
// charge, of the same user, at most what it cost.
func testRefundOfCharge(t *testing.T, s storage.Store) {
	carol := mustUser(t, s, "carol", 1_000_000)
	dave := mustUser(t, s, "dave", 1_000_000)
	if err := s.InsertUsage(ctx(t), userUsage("carol", carol.ID, 1, 151)); err != nil {
		t.Fatal(err)
	}
	refund := func(user string, amount int64, req string) error {
		_, err := s.PostLedger(ctx(t), storage.LedgerEntry{UserID: user, Kind: storage.LedgerRefund, Amount: amount, Actor: "cli", Note: "r", RequestID: req})
		return err
	}
	wantErr(t, "dave refunded for carol's request", refund(dave.ID, 1, "carol-0"), storage.ErrInvalid)
	wantErr(t, "a refund of a request never charged", refund(carol.ID, 1, "no-such-request"), storage.ErrInvalid)
	wantErr(t, "a refund above the charge", refund(carol.ID, 152, "carol-0"), storage.ErrInvalid)
	if err := refund(carol.ID, 151, "carol-0"); err != nil {
		t.Fatalf("refunding the whole charge: %v", err)
	}
	wantErr(t, "refunding twice", refund(carol.ID, 1, "carol-0"), storage.ErrConflict)
	if err := refund(carol.ID, 5, ""); err != nil {
		t.Fatalf("a refund naming no request: %v", err)
	}
	checkLedgerSum(t, s, carol.ID, 1_000_000+5)
	checkLedgerSum(t, s, dave.ID, 1_000_000)
}
