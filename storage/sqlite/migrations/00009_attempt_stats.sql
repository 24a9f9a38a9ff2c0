-- Troupe embedded schema, version 9: the hourly rollup of upstream attempts
-- per account and per provider that package stats reads its 6h, 24h and 7d
-- windows from (docs/admin-api.md#statistics).

-- +goose Up
CREATE TABLE attempt_stats (
    scope   INTEGER NOT NULL,  -- 1: account, 2: provider (storage.StatsScope)
    subject TEXT    NOT NULL,  -- account ID or provider name
    hour    INTEGER NOT NULL,  -- unix ms of the start of the UTC hour
    key     INTEGER NOT NULL,  -- what is counted: stats/pending.go "Stored keys"
    n       INTEGER NOT NULL,  -- attempts with that key, or tokens summed
    PRIMARY KEY (scope, subject, hour, key)
) WITHOUT ROWID;
CREATE INDEX attempt_stats_hour ON attempt_stats (hour);

-- +goose Down
DROP TABLE attempt_stats;
