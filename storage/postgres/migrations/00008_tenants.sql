-- Troupe PostgreSQL schema, version 8: tenants and billing (docs/billing.md).
-- Users own API keys and a balance; every change of a balance is a ledger
-- row and the balance is the ledger's sum, kept in the row's transaction.
-- Money is bigint micro-units (1 = 0.000001 of the currency), never floats.
-- Identifiers and names are COLLATE "C" (bytewise).

-- +goose Up
CREATE TABLE users (
    id              text    COLLATE "C" NOT NULL PRIMARY KEY,  -- uuid
    name            text    COLLATE "C" NOT NULL UNIQUE,
    email           text    COLLATE "C" NOT NULL DEFAULT '',   -- unique when not ''
    password_hash   text        NOT NULL DEFAULT '',           -- argon2id PHC string; '' = cannot log in
    grp             text    COLLATE "C" NOT NULL DEFAULT '',   -- price group ('' = default, ×1)
    disabled        boolean     NOT NULL DEFAULT false,
    models          text[]      NOT NULL DEFAULT '{}',         -- empty means every model
    rpm             bigint      NOT NULL DEFAULT 0,            -- requests per minute across the user's keys; 0 = unlimited
    max_concurrency bigint      NOT NULL DEFAULT 0,            -- requests in flight at once; 0 = unlimited
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    last_login_at   timestamptz                                -- NULL until the first login
);
CREATE UNIQUE INDEX users_email ON users (email) WHERE email <> '';

-- The user who owns the key and pays for it; NULL for an operator key.
ALTER TABLE api_keys ADD COLUMN user_id text COLLATE "C" REFERENCES users (id) ON DELETE CASCADE;
CREATE INDEX api_keys_user ON api_keys (user_id) WHERE user_id IS NOT NULL;

-- The cached sum of the user's ledger rows, updated in the same transaction.
CREATE TABLE balances (
    user_id    text COLLATE "C" NOT NULL PRIMARY KEY,
    balance    bigint      NOT NULL DEFAULT 0,                 -- micro-units
    updated_at timestamptz NOT NULL
);

CREATE TABLE ledger (
    id         bigserial   NOT NULL PRIMARY KEY,
    user_id    text COLLATE "C" NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('topup', 'charge', 'refund', 'adjustment')),
    amount     bigint      NOT NULL,                           -- micro-units: + credit, - debit
    actor      text        NOT NULL DEFAULT '',                -- who: admin:NAME, cli, user:NAME, gateway
    note       text        NOT NULL DEFAULT '',                -- why
    request_id text COLLATE "C" NOT NULL DEFAULT '',           -- usage_records.request_id of a charge or refund
    created_at timestamptz NOT NULL
);
CREATE INDEX ledger_user ON ledger (user_id, id);
-- A request is charged at most once and refunded at most once.
CREATE UNIQUE INDEX ledger_request ON ledger (request_id, kind) WHERE request_id <> '';

CREATE TABLE prices (
    model        text COLLATE "C" NOT NULL PRIMARY KEY,
    currency     text        NOT NULL,                         -- ISO 4217
    input        bigint      NOT NULL,                         -- micro-units per million uncached input tokens
    cached_input bigint      NOT NULL,                         -- … per million cached input tokens
    cache_write  bigint      NOT NULL,                         -- … per million cache-write input tokens
    output       bigint      NOT NULL,                         -- … per million output tokens
    updated_at   timestamptz NOT NULL
);

CREATE TABLE price_groups (
    grp        text COLLATE "C" NOT NULL PRIMARY KEY,
    multiplier bigint NOT NULL                                 -- parts per million: 1000000 = ×1
);

CREATE TABLE invitations (
    id         text COLLATE "C" NOT NULL PRIMARY KEY,          -- uuid
    hash       text COLLATE "C" NOT NULL UNIQUE,               -- SHA-256 of the code; the code is never stored
    prefix     text        NOT NULL DEFAULT '',
    note       text        NOT NULL DEFAULT '',
    max_uses   bigint      NOT NULL,
    uses       bigint      NOT NULL DEFAULT 0,
    disabled   boolean     NOT NULL DEFAULT false,
    expires_at timestamptz,                                    -- NULL = never
    created_by text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL
);

-- Usage records say who paid and what, with the cache-write tokens priced.
ALTER TABLE usage_records
    ADD COLUMN cache_write_tokens bigint NOT NULL DEFAULT 0,
    ADD COLUMN user_id text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN cost bigint NOT NULL DEFAULT 0;                 -- micro-units charged
CREATE INDEX usage_records_user_at ON usage_records (user_id, at DESC, request_id DESC) WHERE user_id <> '';

-- Daily sums per user and model, kept by the usage transaction.
CREATE TABLE usage_daily_users (
    day           date   NOT NULL,                             -- UTC day
    user_id       text COLLATE "C" NOT NULL,
    model         text COLLATE "C" NOT NULL,
    requests      bigint NOT NULL DEFAULT 0,
    input_tokens  bigint NOT NULL DEFAULT 0,
    cached_tokens bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    cost          bigint NOT NULL DEFAULT 0,                   -- micro-units
    PRIMARY KEY (day, user_id, model)
);

-- +goose Down
DROP TABLE usage_daily_users;
DROP INDEX usage_records_user_at;
ALTER TABLE usage_records DROP COLUMN cost, DROP COLUMN user_id, DROP COLUMN cache_write_tokens;
DROP TABLE invitations;
DROP TABLE price_groups;
DROP TABLE prices;
DROP TABLE ledger;
DROP TABLE balances;
DROP INDEX api_keys_user;
ALTER TABLE api_keys DROP COLUMN user_id;
DROP TABLE users;
