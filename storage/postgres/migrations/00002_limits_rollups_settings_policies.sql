-- Troupe PostgreSQL schema, version 2: API key limits, hourly usage rollups,
-- settings, routing policies with their history.

-- +goose Up
ALTER TABLE api_keys
    ADD COLUMN rpm            bigint NOT NULL DEFAULT 0,  -- requests per minute; 0 = unlimited
    ADD COLUMN rpd            bigint NOT NULL DEFAULT 0,  -- requests per UTC day; 0 = unlimited
    ADD COLUMN tokens_per_day bigint NOT NULL DEFAULT 0;  -- input + output tokens per UTC day; 0 = unlimited

-- One row per hour x key x account x model x status, maintained by InsertUsage
-- in the transaction that stores the records: the sums always equal those of
-- the usage_records rows of the group (until the records are pruned).
CREATE TABLE usage_hourly (
    hour             timestamptz NOT NULL,                  -- start of the UTC hour
    key_id           text    COLLATE "C" NOT NULL,
    account_id       text    COLLATE "C" NOT NULL,          -- '' when no account served the requests
    model            text    COLLATE "C" NOT NULL,
    status           bigint      NOT NULL,                  -- HTTP status returned to the client
    requests         bigint      NOT NULL DEFAULT 0,
    input_tokens     bigint      NOT NULL DEFAULT 0,
    cached_tokens    bigint      NOT NULL DEFAULT 0,
    output_tokens    bigint      NOT NULL DEFAULT 0,
    reasoning_tokens bigint      NOT NULL DEFAULT 0,
    cost             double precision NOT NULL DEFAULT 0,   -- USD
    PRIMARY KEY (hour, key_id, account_id, model, status)
);

-- The records stored before this migration, so that the rollups agree with
-- every record from the start.
INSERT INTO usage_hourly (hour, key_id, account_id, model, status,
    requests, input_tokens, cached_tokens, output_tokens, reasoning_tokens)
SELECT date_trunc('hour', at, 'UTC'), key_id, account_id, model, status,
    count(*), sum(input_tokens), sum(cached_tokens), sum(output_tokens), sum(reasoning_tokens)
FROM usage_records
GROUP BY 1, 2, 3, 4, 5;

CREATE TABLE settings (
    key        text    COLLATE "C" NOT NULL PRIMARY KEY,
    value      text        NOT NULL,
    updated_at timestamptz NOT NULL
);

-- One row per policy name; active_version is set on at most one row (the
-- active policy), enforced by policies_one_active.
CREATE TABLE policies (
    name           text    COLLATE "C" NOT NULL PRIMARY KEY,
    latest_version bigint      NOT NULL,
    active_version bigint,                                  -- NULL unless this policy is the active one
    created_at     timestamptz NOT NULL,                    -- first version saved
    updated_at     timestamptz NOT NULL                     -- last version saved or activation
);

CREATE UNIQUE INDEX policies_one_active ON policies ((active_version IS NOT NULL)) WHERE active_version IS NOT NULL;

-- Every saved version, never changed except for activated_at.
CREATE TABLE policy_versions (
    name         text    COLLATE "C" NOT NULL REFERENCES policies (name) ON DELETE CASCADE,
    version      bigint      NOT NULL,                      -- 1, 2, 3, … per name
    source       text        NOT NULL,                      -- Lua source
    created_at   timestamptz NOT NULL,
    activated_at timestamptz,                               -- last activation; NULL if never
    PRIMARY KEY (name, version)
);

-- +goose Down
DROP TABLE policy_versions;
DROP TABLE policies;
DROP TABLE settings;
DROP TABLE usage_hourly;
ALTER TABLE api_keys DROP COLUMN tokens_per_day, DROP COLUMN rpd, DROP COLUMN rpm;
