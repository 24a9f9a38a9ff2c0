-- Troupe PostgreSQL schema, version 1: accounts, API keys, usage records.
-- Times are timestamptz; durations are bigint microseconds; lists are text[].
-- Identifiers and names are COLLATE "C" (bytewise order and comparison, the
-- same as SQLite's). Table and column names are stable: operators query them.

-- +goose Up
CREATE TABLE accounts (
    id              text    COLLATE "C" NOT NULL PRIMARY KEY,   -- uuid
    name            text    COLLATE "C" NOT NULL UNIQUE,
    provider        text        NOT NULL,                       -- codex | openai | openai_compat | anthropic
    base_url        text        NOT NULL DEFAULT '',
    credentials     text        NOT NULL,                       -- JSON of storage.Credentials sealed by storage.Sealer ("v1:k…:…"), never plaintext
    models          text[]      NOT NULL DEFAULT '{}',          -- empty means any model
    max_concurrency bigint      NOT NULL DEFAULT 0,
    grp             text    COLLATE "C" NOT NULL DEFAULT '',
    tags            text[]      NOT NULL DEFAULT '{}',
    priority        bigint      NOT NULL DEFAULT 0,
    disabled        boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

CREATE TABLE api_keys (
    id         text    COLLATE "C" NOT NULL PRIMARY KEY,        -- uuid
    name       text    COLLATE "C" NOT NULL UNIQUE,
    hash       text    COLLATE "C" NOT NULL UNIQUE,             -- lowercase hex SHA-256 of the secret; the secret is never stored
    prefix     text        NOT NULL DEFAULT '',                 -- first characters of the secret, safe to display
    grp        text    COLLATE "C" NOT NULL DEFAULT '',
    models     text[]      NOT NULL DEFAULT '{}',               -- empty means every model
    disabled   boolean     NOT NULL DEFAULT false,
    expires_at timestamptz,                                     -- NULL means never
    created_at timestamptz NOT NULL
);

CREATE TABLE usage_records (
    request_id       text    COLLATE "C" NOT NULL PRIMARY KEY,
    at               timestamptz NOT NULL,                      -- request start
    key_id           text    COLLATE "C" NOT NULL DEFAULT '',
    account_id       text    COLLATE "C" NOT NULL DEFAULT '',   -- '' when no account served it
    model            text    COLLATE "C" NOT NULL DEFAULT '',
    route            text        NOT NULL DEFAULT '',
    stream           boolean     NOT NULL DEFAULT false,
    status           bigint      NOT NULL DEFAULT 0,
    error_class      text        NOT NULL DEFAULT '',
    attempts         bigint      NOT NULL DEFAULT 0,
    latency_us       bigint      NOT NULL DEFAULT 0,
    ttft_us          bigint      NOT NULL DEFAULT 0,
    input_tokens     bigint      NOT NULL DEFAULT 0,
    cached_tokens    bigint      NOT NULL DEFAULT 0,
    output_tokens    bigint      NOT NULL DEFAULT 0,
    reasoning_tokens bigint      NOT NULL DEFAULT 0
);

CREATE INDEX usage_records_at ON usage_records (at);

-- +goose Down
DROP TABLE usage_records;
DROP TABLE api_keys;
DROP TABLE accounts;
