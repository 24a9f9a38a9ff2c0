-- Troupe PostgreSQL schema, version 3: admin API keys.

-- +goose Up
ALTER TABLE api_keys
    ADD COLUMN admin boolean NOT NULL DEFAULT false;  -- may call /api/admin and ask for decision traces

-- +goose Down
ALTER TABLE api_keys DROP COLUMN admin;
