-- Troupe PostgreSQL schema, version 9: the hourly rollup of upstream
-- attempts per account and per provider that package stats reads its 6h,
-- 24h and 7d windows from (docs/admin-api.md#statistics).

-- +goose Up
CREATE TABLE attempt_stats (
    scope   smallint    NOT NULL,           -- 1: account, 2: provider (storage.StatsScope)
    subject text        COLLATE "C" NOT NULL, -- account ID or provider name
    hour    timestamptz NOT NULL,           -- start of the UTC hour
    key     smallint    NOT NULL,           -- what is counted: stats/pending.go "Stored keys"
    n       bigint      NOT NULL,           -- attempts with that key, or tokens summed
    PRIMARY KEY (scope, subject, hour, key)
);
CREATE INDEX attempt_stats_hour ON attempt_stats (hour);

-- +goose Down
DROP TABLE attempt_stats;
