-- Troupe PostgreSQL schema, version 10: the account change feed
-- (docs/fleet.md#account-changes). Every change of an account takes the
-- next value of account_feed.version, held in one row so that writers take
-- their versions in commit order (the row lock is held to commit): a reader
-- that has seen version v has seen every change up to v. A deleted account
-- leaves a tombstone with its deletion's version.

-- +goose Up
CREATE TABLE account_feed (
    one     boolean NOT NULL PRIMARY KEY DEFAULT true CHECK (one),
    version bigint  NOT NULL            -- last version given to a change
);
-- 1, not 0: rows changed before the feed keep version 0 and are read by a
-- full read (since 0), after which a reader is at version 1.
INSERT INTO account_feed (one, version) VALUES (true, 1);

ALTER TABLE accounts ADD COLUMN version bigint NOT NULL DEFAULT 0;  -- account_feed.version at the last change
CREATE INDEX accounts_version ON accounts (version);

CREATE TABLE account_tombstones (
    id      text   COLLATE "C" NOT NULL PRIMARY KEY,  -- the deleted account's id
    version bigint NOT NULL                            -- account_feed.version of the deletion
);
CREATE INDEX account_tombstones_version ON account_tombstones (version);

-- +goose Down
DROP TABLE account_tombstones;
DROP INDEX accounts_version;
ALTER TABLE accounts DROP COLUMN version;
DROP TABLE account_feed;
