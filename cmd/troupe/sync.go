package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-gw/troupe/admin"
	"github.com/troupe-gw/troupe/storage"
)

// accountPoll is how often the account change feed is read without an
// announcement: the safety net for a broadcast missed (a cache outage, a
// CLI change without a shared cache). A read with no change costs one
// indexed query that returns no row.
const accountPoll = 5 * time.Second

// accountFeed is where this instance is in the storage's account change
// feed (docs/fleet.md#account-changes).
type accountFeed struct {
	version int64         // the feed's version last applied
	wake    chan struct{} // an announced change: read now (buffer 1)
}

// loadAccounts reads every stored account from the change feed, credentials
// opened unless accounts run only on their owners (fleet.ownership: the
// pool opens an account's credentials when this instance runs it), and
// remembers the feed's version for syncAccounts.
func (a *app) loadAccounts(ctx context.Context) ([]storage.Account, error) {
	ch, err := a.store.AccountChanges(ctx, 0, !a.cfg.ownership())
	if err != nil {
		return nil, err
	}
	a.feed.version = ch.Version
	return ch.Accounts, nil
}

// syncAccounts applies to the running pool the account changes made
// outside this process (other instances' admin API, troupe accounts
// add/remove, token refreshes, hygiene), until ctx ends: it reads the
// change feed from the last version seen at once when a change is
// announced on the cache (admin.AccountsChannel) and every interval
// otherwise. A read returns only the rows changed and the IDs deleted
// since, so steady state decrypts nothing and reads no unchanged row;
// with fleet.ownership even the changed rows' credentials stay sealed
// until the pool runs the account.
func (a *app) syncAccounts(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.feed.wake:
		}
		if err := a.applyAccountChanges(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("account sync", "err", err)
		}
	}
}

// applyAccountChanges reads the change feed once and applies it. A full
// read (storage.AccountChanges.Full: this instance's version was older than
// a tombstone pruned, so a deletion may be gone from the feed) removes
// every account of the pool that is not in it.
func (a *app) applyAccountChanges(ctx context.Context) error {
	ch, err := a.store.AccountChanges(ctx, a.feed.version, !a.cfg.ownership())
	if err != nil {
		return err
	}
	deleted := ch.Deleted
	if ch.Full {
		// The pool's accounts are taken before a second full read: an
		// account is stored before the pool runs it, so one that the pool
		// runs and that read lacks was deleted (taken after the read, an
		// account created meanwhile would be removed for a moment).
		running, err := a.sys.Accounts(ctx)
		if err != nil {
			return err
		}
		if ch, err = a.store.AccountChanges(ctx, 0, !a.cfg.ownership()); err != nil {
			return err
		}
		deleted = goneFrom(running, ch.Accounts)
		a.log.Warn("account feed: this instance was behind the tombstones kept; every account read again",
			"version", a.feed.version, "accounts", len(ch.Accounts), "removed", len(deleted))
	}
	for _, acc := range ch.Accounts {
		a.sys.PutAccount(acc)
		a.log.Info("account applied", "account", acc.Name, "version", acc.Version)
	}
	for _, id := range deleted {
		a.sys.RemoveAccount(id)
		a.server.Stats().Forget(id)
		a.log.Info("account removed", "id", id)
	}
	a.feed.version = ch.Version
	return nil
}

// goneFrom returns the IDs in running that no account of stored has, in
// running's order.
func goneFrom(running []string, stored []storage.Account) []string {
	keep := make(map[string]struct{}, len(stored))
	for _, acc := range stored {
		keep[acc.ID] = struct{}{}
	}
	var gone []string
	for _, id := range running {
		if _, ok := keep[id]; !ok {
			gone = append(gone, id)
		}
	}
	return gone
}

// announced is the app's store, which announces every account change it
// stores on the cache (admin.AccountsChannel), so that every instance
// reads the change feed at once instead of at its next poll. The cache is
// the app's once open (with the in-memory cache, the one instance itself).
type announced struct {
	storage.Store
	a *app
}

// PutAccount stores acc and announces the change.
func (s announced) PutAccount(ctx context.Context, acc storage.Account) (storage.Account, error) {
	stored, err := s.Store.PutAccount(ctx, acc)
	if err == nil {
		s.a.announceAccount(ctx, "put "+stored.ID+" "+strconv.FormatInt(stored.Version, 10))
	}
	return stored, err
}

// DeleteAccount deletes the account and announces the change.
func (s announced) DeleteAccount(ctx context.Context, idOrName string) error {
	err := s.Store.DeleteAccount(ctx, idOrName)
	if err == nil {
		s.a.announceAccount(ctx, "delete "+idOrName)
	}
	return err
}

// announceAccount publishes msg on admin.AccountsChannel. A failure is
// logged: the change is stored, and the others read it at their next poll.
func (a *app) announceAccount(ctx context.Context, msg string) {
	if a.cache == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := a.cache.Publish(ctx, admin.AccountsChannel, msg); err != nil {
		a.log.Warn("account change broadcast failed; other instances apply it within 5 s", "err", err)
	}
}

// watchAccounts wakes syncAccounts on every message of
// admin.AccountsChannel, until ch closes.
func (a *app) watchAccounts(ch <-chan string) {
	for range ch {
		select {
		case a.feed.wake <- struct{}{}:
		default: // a read is already due; it will see this change too
		}
	}
}

// pruneUsage deletes usage records, hourly rollups, the daily rollups per
// user and model and the account change feed's tombstones past their
// retention, now and then every interval, until ctx ends. The backends delete in small batches, so this never holds a long lock.
func (a *app) pruneUsage(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		a.pruneOnce(ctx, time.Now().UTC())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pruneOnce is one pass of pruneUsage at now: each retention is read from its
// setting (storage.SettingUsage*Days and storage.SettingAccountTombstonesDays;
// their defaults when unset or invalid), and a failure is logged, never
// fatal: the next pass retries. Every instance runs it; a pass that another
// has just made finds nothing to delete.
func (a *app) pruneOnce(ctx context.Context, now time.Time) {
	recDays := a.settingInt(ctx, storage.SettingUsageRecordsDays, storage.DefaultUsageRecordsDays)
	rollDays := a.settingInt(ctx, storage.SettingUsageHourlyDays, storage.DefaultUsageHourlyDays)
	dailyDays := a.settingInt(ctx, storage.SettingUsageDailyDays, storage.DefaultUsageDailyDays)
	recs, rolls, err := a.store.PruneUsage(ctx, now.AddDate(0, 0, -recDays), now.AddDate(0, 0, -rollDays))
	switch {
	case err != nil && ctx.Err() == nil:
		a.log.Warn("usage retention", "err", err)
	case recs > 0 || rolls > 0:
		a.log.Info("usage retention", "records_deleted", recs, "rollups_deleted", rolls, "records_days", recDays, "rollups_days", rollDays)
	}
	daily, err := a.store.PruneUserDaily(ctx, now.AddDate(0, 0, -dailyDays))
	switch {
	case err != nil && ctx.Err() == nil:
		a.log.Warn("daily spend retention", "err", err)
	case daily > 0:
		a.log.Info("daily spend retention", "rows_deleted", daily, "days", dailyDays)
	}
	tombDays := a.settingInt(ctx, storage.SettingAccountTombstonesDays, storage.DefaultAccountTombstonesDays)
	tombs, err := a.store.PruneAccountTombstones(ctx, now.AddDate(0, 0, -tombDays))
	switch {
	case err != nil && ctx.Err() == nil:
		a.log.Warn("account tombstone retention", "err", err)
	case tombs > 0:
		a.log.Info("account tombstone retention", "tombstones_deleted", tombs, "days", tombDays)
	}
}

// settingInt reads an integer setting, falling back to def when it is unset or invalid.
func (a *app) settingInt(ctx context.Context, key string, def int) int {
	v, err := a.store.GetSetting(ctx, key)
	if err != nil {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		a.log.Warn("ignoring invalid setting", "key", key, "value", v)
		return def
	}
	return n
}

// background runs the app's maintenance loops until ctx ends.
func (a *app) background(ctx context.Context) {
	go a.syncAccounts(ctx, accountPoll)
	go a.pruneUsage(ctx, time.Hour)
	go a.hygiene.Run(ctx) // returns at once when hygiene.action is off
	go a.server.Stats().Run(ctx, func(err error) {
		a.log.Warn("stats: the long windows' counts are not stored yet; retrying", "err", err)
	})
	go a.refreshCatalog(ctx) // codex.go
	a.watchPolicies(ctx)
}
