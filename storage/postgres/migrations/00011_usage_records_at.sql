-- Troupe PostgreSQL schema, version 11: usage_records loses its index on at
-- alone. usage_records_at_id (at DESC, request_id DESC) serves every query
-- that ranges over at (the request log's pages, the usage series, the
-- export, the prune) as well, and each usage record cost an insert into
-- both (docs/benchmarks.md, issue 21).

-- +goose Up
DROP INDEX usage_records_at;

-- +goose Down
CREATE INDEX usage_records_at ON usage_records (at);
