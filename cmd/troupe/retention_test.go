package main

import (
	"bytes"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/troupe-gw/troupe/storage"
	"github.com/troupe-gw/troupe/storage/postgres"
	"github.com/troupe-gw/troupe/storage/sqlite"
	"github.com/troupe-gw/troupe/storage/storagetest"
)

// TestPruneOnce runs one pass of the retention loop on SQLite and PostgreSQL:
// request records go after retention.usage_records_days, the daily spend
// rollups after retention.usage_daily_days (default five years), each on its
// own setting; an invalid setting falls back to its default; account
// tombstones after retention.account_tombstones_days; balances and the
// ledger are never pruned.
func TestPruneOnce(t *testing.T) {
	sealer, err := storage.NewSealer(bytes.Repeat([]byte{5, 3, 1, 8}, 8))
	if err != nil {
		t.Fatal(err)
	}
	backends := map[string]func(t *testing.T) storage.Store{
		"sqlite": func(t *testing.T) storage.Store {
			s, err := sqlite.Open(t.Context(), sqlite.MemoryPath, sealer)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"postgres": func(t *testing.T) storage.Store {
			s, err := postgres.Open(t.Context(), storagetest.PostgresDB(t), sealer)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { s.Close() })
			testPruneOnce(t, s)
		})
	}
}

func testPruneOnce(t *testing.T, s storage.Store) {
	ctx := t.Context()
	now := time.Date(2031, 6, 15, 12, 0, 0, 0, time.UTC)
	u, err := s.CreateUser(ctx, storage.User{Name: "retained"}, storage.NewUser{Balance: 5_000_000, Actor: "test", Note: "start"})
	if err != nil {
		t.Fatal(err)
	}
	// One charged request each 2, 40, 800 and 2000 days ago.
	ages := []int{2, 40, 800, 2000}
	var recs []storage.UsageRecord
	for i, days := range ages {
		r := storagetest.SampleUsage("ret"+strconv.Itoa(days), 1)[0]
		r.At, r.UserID, r.Cost = now.AddDate(0, 0, -days), u.ID, int64(100*(i+1))
		recs = append(recs, r)
	}
	if err := s.InsertUsage(ctx, recs); err != nil {
		t.Fatal(err)
	}
	dailyDays := func() []int {
		t.Helper()
		rows, err := s.UserDaily(ctx, storage.UserDailyQuery{UserID: u.ID})
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for _, r := range rows {
			out = append(out, int(now.Sub(r.Day).Hours()/24))
		}
		return out
	}
	records := func() int64 {
		t.Helper()
		n, err := s.CountUsage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	a := &app{store: s, log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	// Defaults: records 30 days, daily rollups 1825 days.
	a.pruneOnce(ctx, now)
	if n := records(); n != 1 {
		t.Errorf("records after the default retention: %d, want 1 (the one of 2 days ago)", n)
	}
	if got := dailyDays(); len(got) != 3 || got[0] != 800 {
		t.Errorf("daily rollups after the default retention, days ago: %v, want 800, 40, 2", got)
	}

	// An invalid value is the default; a valid one applies at the next pass.
	if err := s.PutSetting(ctx, storage.SettingUsageDailyDays, "0"); err != nil {
		t.Fatal(err)
	}
	a.pruneOnce(ctx, now)
	if got := dailyDays(); len(got) != 3 {
		t.Errorf("daily rollups with an invalid setting, days ago: %v, want 800, 40, 2", got)
	}
	if err := s.PutSetting(ctx, storage.SettingUsageDailyDays, "30"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutSetting(ctx, storage.SettingUsageRecordsDays, "1"); err != nil {
		t.Fatal(err)
	}
	a.pruneOnce(ctx, now)
	if got := dailyDays(); len(got) != 1 || got[0] != 2 {
		t.Errorf("daily rollups kept 30 days, days ago: %v, want 2", got)
	}
	if n := records(); n != 0 {
		t.Errorf("records kept 1 day: %d, want 0", n)
	}

	// Account tombstones go after retention.account_tombstones_days: a
	// reader from before the deletion is then answered with a full read.
	acc, err := s.PutAccount(ctx, storagetest.SampleAccount("tombstoned"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAccount(ctx, acc.ID); err != nil {
		t.Fatal(err)
	}
	full := func() bool {
		t.Helper()
		ch, err := s.AccountChanges(ctx, acc.Version, false)
		if err != nil {
			t.Fatal(err)
		}
		return ch.Full
	}
	if err := s.PutSetting(ctx, storage.SettingAccountTombstonesDays, "3650"); err != nil { // ten years: the deletion (today) is within
		t.Fatal(err)
	}
	a.pruneOnce(ctx, now)
	if full() {
		t.Error("a tombstone within retention.account_tombstones_days was pruned")
	}
	if err := s.PutSetting(ctx, storage.SettingAccountTombstonesDays, "1"); err != nil {
		t.Fatal(err)
	}
	a.pruneOnce(ctx, now)
	if !full() {
		t.Error("a tombstone past retention.account_tombstones_days was kept")
	}

	// Money is not pruned: the balance is still the ledger's sum.
	bal, err := s.Balance(ctx, u.ID)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.Ledger(ctx, storage.LedgerQuery{UserID: u.ID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, r := range rows {
		sum += r.Amount
	}
	if want := int64(5_000_000 - 100 - 200 - 300 - 400); bal != want || sum != want || len(rows) != 5 {
		t.Errorf("after pruning: balance %d, ledger sum %d over %d rows; want %d over 5", bal, sum, len(rows), want)
	}
}
