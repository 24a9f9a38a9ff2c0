-- Troupe PostgreSQL schema, version 4: admin UI users, and an index for the
-- request log's newest-first pages.
-- Identifiers and names are COLLATE "C" (bytewise). Table and column names
-- are stable: operators query them.

-- +goose Up
CREATE TABLE admin_users (
    id            text    COLLATE "C" NOT NULL PRIMARY KEY,     -- uuid
    username      text    COLLATE "C" NOT NULL UNIQUE,
    password_hash text        NOT NULL,                         -- argon2id PHC string; the password is never stored
    disabled      boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    last_login_at timestamptz                                   -- NULL until the first login
);

CREATE INDEX usage_records_at_id ON usage_records (at DESC, request_id DESC);

-- +goose Down
DROP INDEX usage_records_at_id;
DROP TABLE admin_users;
