-- Troupe embedded schema, version 10: the account change feed
-- (docs/fleet.md#account-changes). Every change of an account takes the
-- next value of account_feed.version (the one writer connection orders
-- them); a deleted account leaves a tombstone with its deletion's version.

-- +goose Up
CREATE TABLE account_feed (
    one     INTEGER NOT NULL PRIMARY KEY CHECK (one = 1),
    version INTEGER NOT NULL                 -- last version given to a change
);
-- 1, not 0: rows changed before the feed keep version 0 and are read by a
-- full read (since 0), after which a reader is at version 1.
INSERT INTO account_feed (one, version) VALUES (1, 1);

ALTER TABLE accounts ADD COLUMN version INTEGER NOT NULL DEFAULT 0; -- account_feed.version at the last change
CREATE INDEX accounts_version ON accounts (version);

CREATE TABLE account_tombstones (
    id      TEXT    NOT NULL PRIMARY KEY,    -- the deleted account's id
    version INTEGER NOT NULL                 -- account_feed.version of the deletion
);
CREATE INDEX account_tombstones_version ON account_tombstones (version);

-- +goose Down
DROP TABLE account_tombstones;
DROP INDEX accounts_version;
ALTER TABLE accounts DROP COLUMN version;
DROP TABLE account_feed;
