-- Troupe embedded schema, version 7: a usage record says whether its token
-- counts are the gateway's estimate (a stream cut before the upstream
-- reported its usage; docs/storage.md#estimated-usage).

-- +goose Up
ALTER TABLE usage_records ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0; -- 1: tokens estimated by the gateway

-- +goose Down
ALTER TABLE usage_records DROP COLUMN estimated;
