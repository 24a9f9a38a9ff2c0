package main

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// syncAccounts polls storage and applies account changes made outside this
// process (troupe accounts add/remove) to the running pool, until ctx ends.
func (a *app) syncAccounts(ctx context.Context, every time.Duration) {
	known := map[string]time.Time{}
	if accs, err := a.store.ListAccounts(ctx); err == nil {
		for _, acc := range accs {
			known[acc.ID] = acc.UpdatedAt
		}
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		accs, err := a.store.ListAccounts(ctx)
		if err != nil {
			a.log.Warn("account sync", "err", err)
			continue
		}
		seen := make(map[string]bool, len(accs))
		for _, acc := range accs {
			seen[acc.ID] = true
			if at, ok := known[acc.ID]; !ok || !at.Equal(acc.UpdatedAt) {
				known[acc.ID] = acc.UpdatedAt
				a.sys.PutAccount(acc)
				a.log.Info("account applied", "account", acc.Name)
			}
		}
		for id := range known {
			if !seen[id] {
				delete(known, id)
				a.sys.RemoveAccount(id)
				a.server.Stats().Forget(id)
				a.log.Info("account removed", "id", id)
			}
		}
	}
}

// Retention defaults, overridable by the settings of the same names.
const (
	defaultRecordsDays = 30
	defaultRollupsDays = 400
)

// pruneUsage deletes usage records and rollups past their retention, now and
// then every interval, until ctx ends. The backends delete in small batches,
// so this never holds a long lock.
func (a *app) pruneUsage(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		recDays := a.settingInt(ctx, "retention.usage_records_days", defaultRecordsDays)
		rollDays := a.settingInt(ctx, "retention.usage_hourly_days", defaultRollupsDays)
		now := time.Now().UTC()
		recs, rolls, err := a.store.PruneUsage(ctx, now.AddDate(0, 0, -recDays), now.AddDate(0, 0, -rollDays))
		switch {
		case err != nil && ctx.Err() == nil:
			a.log.Warn("usage retention", "err", err)
		case recs > 0 || rolls > 0:
			a.log.Info("usage retention", "records_deleted", recs, "rollups_deleted", rolls, "records_days", recDays, "rollups_days", rollDays)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
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
	go a.syncAccounts(ctx, 5*time.Second)
	go a.pruneUsage(ctx, time.Hour)
	go a.hygiene.Run(ctx) // returns at once when hygiene.action is off
	go a.server.Stats().Run(ctx, func(err error) {
		a.log.Warn("stats: the long windows' counts are not stored yet; retrying", "err", err)
	})
	go a.refreshCatalog(ctx) // codex.go
	a.watchPolicies(ctx)
}
