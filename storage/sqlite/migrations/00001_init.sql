-- Troupe embedded schema, version 1: accounts, API keys, usage records.
-- Times are unix milliseconds (UTC); durations are microseconds; booleans are 0/1;
-- lists are JSON arrays of strings. Table and column names are stable: operators query them.

-- +goose Up
CREATE TABLE accounts (
    id              TEXT    NOT NULL PRIMARY KEY,          -- uuid
    name            TEXT    NOT NULL UNIQUE,
    provider        TEXT    NOT NULL,                      -- codex | openai | openai_compat | anthropic
    base_url        TEXT    NOT NULL DEFAULT '',
    credentials     TEXT    NOT NULL,                      -- JSON of storage.Credentials sealed by storage.Sealer ("v1:k…:…"), never plaintext
    models          TEXT    NOT NULL DEFAULT '[]',         -- JSON array; empty means any model
    max_concurrency INTEGER NOT NULL DEFAULT 0,
    grp             TEXT    NOT NULL DEFAULT '',
    tags            TEXT    NOT NULL DEFAULT '[]',         -- JSON array
    priority        INTEGER NOT NULL DEFAULT 0,
    disabled        INTEGER NOT NULL DEFAULT 0,
    created_at      INTEGER NOT NULL,                      -- unix ms
    updated_at      INTEGER NOT NULL                       -- unix ms
);

CREATE TABLE api_keys (
    id         TEXT    NOT NULL PRIMARY KEY,               -- uuid
    name       TEXT    NOT NULL UNIQUE,
    hash       TEXT    NOT NULL UNIQUE,                    -- lowercase hex SHA-256 of the secret; the secret is never stored
    prefix     TEXT    NOT NULL DEFAULT '',                -- first characters of the secret, safe to display
    grp        TEXT    NOT NULL DEFAULT '',
    models     TEXT    NOT NULL DEFAULT '[]',              -- JSON array; empty means every model
    disabled   INTEGER NOT NULL DEFAULT 0,
    expires_at INTEGER,                                    -- unix ms; NULL means never
    created_at INTEGER NOT NULL                            -- unix ms
);

CREATE TABLE usage_records (
    request_id       TEXT    NOT NULL PRIMARY KEY,
    at               INTEGER NOT NULL,                     -- unix ms, request start
    key_id           TEXT    NOT NULL DEFAULT '',
    account_id       TEXT    NOT NULL DEFAULT '',          -- '' when no account served it
    model            TEXT    NOT NULL DEFAULT '',
    route            TEXT    NOT NULL DEFAULT '',
    stream           INTEGER NOT NULL DEFAULT 0,
    status           INTEGER NOT NULL DEFAULT 0,
    error_class      TEXT    NOT NULL DEFAULT '',
    attempts         INTEGER NOT NULL DEFAULT 0,
    latency_us       INTEGER NOT NULL DEFAULT 0,
    ttft_us          INTEGER NOT NULL DEFAULT 0,
    input_tokens     INTEGER NOT NULL DEFAULT 0,
    cached_tokens    INTEGER NOT NULL DEFAULT 0,
    output_tokens    INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0
);

CREATE INDEX usage_records_at ON usage_records (at);

-- +goose Down
DROP TABLE usage_records;
DROP TABLE api_keys;
DROP TABLE accounts;
