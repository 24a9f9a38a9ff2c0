-- Troupe embedded schema, version 2: API key limits, hourly usage rollups,
-- settings, routing policies with their history.
-- Times are unix milliseconds (UTC); booleans are 0/1. Table and column names
-- are stable: operators query them.

-- +goose Up
ALTER TABLE api_keys ADD COLUMN rpm            INTEGER NOT NULL DEFAULT 0; -- requests per minute; 0 = unlimited
ALTER TABLE api_keys ADD COLUMN rpd            INTEGER NOT NULL DEFAULT 0; -- requests per UTC day; 0 = unlimited
ALTER TABLE api_keys ADD COLUMN tokens_per_day INTEGER NOT NULL DEFAULT 0; -- input + output tokens per UTC day; 0 = unlimited

-- One row per hour x key x account x model x status, maintained by InsertUsage
-- in the transaction that stores the records: the sums always equal those of
-- the usage_records rows of the group (until the records are pruned).
CREATE TABLE usage_hourly (
    hour             INTEGER NOT NULL,                     -- unix ms of the start of the UTC hour
    key_id           TEXT    NOT NULL,
    account_id       TEXT    NOT NULL,                     -- '' when no account served the requests
    model            TEXT    NOT NULL,
    status           INTEGER NOT NULL,                     -- HTTP status returned to the client
    requests         INTEGER NOT NULL DEFAULT 0,
    input_tokens     INTEGER NOT NULL DEFAULT 0,
    cached_tokens    INTEGER NOT NULL DEFAULT 0,
    output_tokens    INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    cost             REAL    NOT NULL DEFAULT 0,           -- USD
    PRIMARY KEY (hour, key_id, account_id, model, status)
);

-- The records stored before this migration, so that the rollups agree with
-- every record from the start (the hour rounds down, also before 1970).
INSERT INTO usage_hourly (hour, key_id, account_id, model, status,
    requests, input_tokens, cached_tokens, output_tokens, reasoning_tokens)
SELECT at - ((at % 3600000) + 3600000) % 3600000, key_id, account_id, model, status,
    count(*), sum(input_tokens), sum(cached_tokens), sum(output_tokens), sum(reasoning_tokens)
FROM usage_records
GROUP BY 1, 2, 3, 4, 5;

CREATE TABLE settings (
    key        TEXT    NOT NULL PRIMARY KEY,
    value      TEXT    NOT NULL,
    updated_at INTEGER NOT NULL                            -- unix ms
);

-- One row per policy name; active_version is set on at most one row (the
-- active policy), enforced by policies_one_active.
CREATE TABLE policies (
    name           TEXT    NOT NULL PRIMARY KEY,
    latest_version INTEGER NOT NULL,
    active_version INTEGER,                                -- NULL unless this policy is the active one
    created_at     INTEGER NOT NULL,                       -- unix ms, first version saved
    updated_at     INTEGER NOT NULL                        -- unix ms, last version saved or activation
);

CREATE UNIQUE INDEX policies_one_active ON policies ((active_version IS NOT NULL)) WHERE active_version IS NOT NULL;

-- Every saved version, never changed except for activated_at.
CREATE TABLE policy_versions (
    name         TEXT    NOT NULL REFERENCES policies (name) ON DELETE CASCADE,
    version      INTEGER NOT NULL,                         -- 1, 2, 3, … per name
    source       TEXT    NOT NULL,                         -- Lua source
    created_at   INTEGER NOT NULL,                         -- unix ms
    activated_at INTEGER,                                  -- unix ms of the last activation; NULL if never
    PRIMARY KEY (name, version)
);

-- +goose Down
DROP TABLE policy_versions;
DROP TABLE policies;
DROP TABLE settings;
DROP TABLE usage_hourly;
ALTER TABLE api_keys DROP COLUMN tokens_per_day;
ALTER TABLE api_keys DROP COLUMN rpd;
ALTER TABLE api_keys DROP COLUMN rpm;
