-- Troupe embedded schema, version 3: admin API keys.
-- Booleans are 0/1. Table and column names are stable: operators query them.

-- +goose Up
ALTER TABLE api_keys ADD COLUMN admin INTEGER NOT NULL DEFAULT 0; -- 1: may call /api/admin and ask for decision traces

-- +goose Down
ALTER TABLE api_keys DROP COLUMN admin;
