-- Troupe PostgreSQL schema, version 14: api_keys.revision counts the key's
-- updates (1 when created, UpdateAPIKey adds one), so that an admin edit can be made
-- conditional on the revision it read (APIKey.IfRevision): two operators,
-- on two instances, editing the same key no longer overwrite each other
-- silently; the second gets a 409 (docs/admin-api.md, "Concurrent edits").

-- +goose Up
ALTER TABLE api_keys ADD COLUMN revision bigint NOT NULL DEFAULT 1;

-- +goose Down
ALTER TABLE api_keys DROP COLUMN revision;
