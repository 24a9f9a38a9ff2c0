-- Troupe embedded schema, version 4: admin UI users, and an index for the
-- request log's newest-first pages.
-- Times are unix milliseconds (UTC); booleans are 0/1. Table and column names
-- are stable: operators query them.

-- +goose Up
CREATE TABLE admin_users (
    id            TEXT    NOT NULL PRIMARY KEY,            -- uuid
    username      TEXT    NOT NULL UNIQUE,
    password_hash TEXT    NOT NULL,                        -- argon2id PHC string; the password is never stored
    disabled      INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,                        -- unix ms
    updated_at    INTEGER NOT NULL,                        -- unix ms
    last_login_at INTEGER                                  -- unix ms; NULL until the first login
);

CREATE INDEX usage_records_at_id ON usage_records (at DESC, request_id DESC);

-- +goose Down
DROP INDEX usage_records_at_id;
DROP TABLE admin_users;
