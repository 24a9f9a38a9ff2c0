-- Troupe embedded schema, version 12: account tombstones are pruned
-- (docs/fleet.md#account-changes). A tombstone keeps when its account was
-- deleted (Unix ms); PruneAccountTombstones deletes those past the
-- retention and raises account_feed.pruned to the highest version it
-- deleted. A reader whose version is below pruned may have missed a
-- deletion, so it is answered with every account (a full resync) instead
-- of its changes.

-- +goose Up
ALTER TABLE account_tombstones ADD COLUMN deleted_at INTEGER NOT NULL DEFAULT 0; -- Unix ms
-- Tombstones from before this version count as deleted now: kept a full
-- retention from the upgrade.
UPDATE account_tombstones SET deleted_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000;
ALTER TABLE account_feed ADD COLUMN pruned INTEGER NOT NULL DEFAULT 0; -- highest tombstone version pruned

-- +goose Down
ALTER TABLE account_feed DROP COLUMN pruned;
ALTER TABLE account_tombstones DROP COLUMN deleted_at;
