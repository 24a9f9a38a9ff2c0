package main

import (
	"context"
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
				a.log.Info("account removed", "id", id)
			}
		}
	}
}
