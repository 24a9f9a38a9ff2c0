-- Troupe embedded schema, version 8: tenants and billing (docs/billing.md).
-- Users own API keys and a balance; every change of a balance is a ledger
-- row and the balance is the ledger's sum, kept in the row's transaction.
-- Money is integer micro-units (1 = 0.000001 of the currency), never floats.
-- Times are unix milliseconds (UTC); booleans 0/1; lists JSON arrays.

-- +goose Up
CREATE TABLE users (
    id              TEXT    NOT NULL PRIMARY KEY,          -- uuid
    name            TEXT    NOT NULL UNIQUE,
    email           TEXT    NOT NULL DEFAULT '',           -- unique when not ''
    password_hash   TEXT    NOT NULL DEFAULT '',           -- argon2id PHC string; '' = cannot log in
    grp             TEXT    NOT NULL DEFAULT '',           -- price group ('' = default, ×1)
    disabled        INTEGER NOT NULL DEFAULT 0,
    models          TEXT    NOT NULL DEFAULT '[]',         -- JSON array; empty means every model
    rpm             INTEGER NOT NULL DEFAULT 0,            -- requests per minute across the user's keys; 0 = unlimited
    max_concurrency INTEGER NOT NULL DEFAULT 0,            -- requests in flight at once; 0 = unlimited
    created_at      INTEGER NOT NULL,                      -- unix ms
    updated_at      INTEGER NOT NULL,                      -- unix ms
    last_login_at   INTEGER                                -- unix ms; NULL until the first login
);
CREATE UNIQUE INDEX users_email ON users (email) WHERE email <> '';

-- The user who owns the key and pays for it; NULL for an operator key.
ALTER TABLE api_keys ADD COLUMN user_id TEXT REFERENCES users (id) ON DELETE CASCADE;
CREATE INDEX api_keys_user ON api_keys (user_id) WHERE user_id IS NOT NULL;

-- The cached sum of the user's ledger rows, updated in the same transaction.
CREATE TABLE balances (
    user_id    TEXT    NOT NULL PRIMARY KEY,
    balance    INTEGER NOT NULL DEFAULT 0,                 -- micro-units
    updated_at INTEGER NOT NULL                            -- unix ms
);

CREATE TABLE ledger (
    id         INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    user_id    TEXT    NOT NULL,
    kind       TEXT    NOT NULL CHECK (kind IN ('topup', 'charge', 'refund', 'adjustment')),
    amount     INTEGER NOT NULL,                           -- micro-units: + credit, - debit
    actor      TEXT    NOT NULL DEFAULT '',                -- who: admin:NAME, cli, user:NAME, gateway
    note       TEXT    NOT NULL DEFAULT '',                -- why
    request_id TEXT    NOT NULL DEFAULT '',                -- usage_records.request_id of a charge or refund
    created_at INTEGER NOT NULL                            -- unix ms
);
CREATE INDEX ledger_user ON ledger (user_id, id);
-- A request is charged at most once and refunded at most once.
CREATE UNIQUE INDEX ledger_request ON ledger (request_id, kind) WHERE request_id <> '';

CREATE TABLE prices (
    model        TEXT    NOT NULL PRIMARY KEY,
    currency     TEXT    NOT NULL,                         -- ISO 4217
    input        INTEGER NOT NULL,                         -- micro-units per million uncached input tokens
    cached_input INTEGER NOT NULL,                         -- … per million cached input tokens
    cache_write  INTEGER NOT NULL,                         -- … per million cache-write input tokens
    output       INTEGER NOT NULL,                         -- … per million output tokens
    updated_at   INTEGER NOT NULL                          -- unix ms
);

CREATE TABLE price_groups (
    grp        TEXT    NOT NULL PRIMARY KEY,
    multiplier INTEGER NOT NULL                            -- parts per million: 1000000 = ×1
);

CREATE TABLE invitations (
    id         TEXT    NOT NULL PRIMARY KEY,               -- uuid
    hash       TEXT    NOT NULL UNIQUE,                    -- SHA-256 of the code; the code is never stored
    prefix     TEXT    NOT NULL DEFAULT '',
    note       TEXT    NOT NULL DEFAULT '',
    max_uses   INTEGER NOT NULL,
    uses       INTEGER NOT NULL DEFAULT 0,
    disabled   INTEGER NOT NULL DEFAULT 0,
    expires_at INTEGER,                                    -- unix ms; NULL = never
    created_by TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL                            -- unix ms
);

-- Usage records say who paid and what, with the cache-write tokens priced.
ALTER TABLE usage_records ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE usage_records ADD COLUMN user_id TEXT NOT NULL DEFAULT '';
ALTER TABLE usage_records ADD COLUMN cost INTEGER NOT NULL DEFAULT 0;    -- micro-units charged
CREATE INDEX usage_records_user_at ON usage_records (user_id, at DESC, request_id DESC) WHERE user_id <> '';

-- Daily sums per user and model, kept by the usage transaction.
CREATE TABLE usage_daily_users (
    day           INTEGER NOT NULL,                        -- unix ms of 00:00 UTC
    user_id       TEXT    NOT NULL,
    model         TEXT    NOT NULL,
    requests      INTEGER NOT NULL DEFAULT 0,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost          INTEGER NOT NULL DEFAULT 0,              -- micro-units
    PRIMARY KEY (day, user_id, model)
);

-- +goose Down
DROP TABLE usage_daily_users;
DROP INDEX usage_records_user_at;
ALTER TABLE usage_records DROP COLUMN cost;
ALTER TABLE usage_records DROP COLUMN user_id;
ALTER TABLE usage_records DROP COLUMN cache_write_tokens;
DROP TABLE invitations;
DROP TABLE price_groups;
DROP TABLE prices;
DROP TABLE ledger;
DROP TABLE balances;
DROP INDEX api_keys_user;
ALTER TABLE api_keys DROP COLUMN user_id;
DROP TABLE users;
