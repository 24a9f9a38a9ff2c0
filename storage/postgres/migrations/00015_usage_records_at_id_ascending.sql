-- Troupe PostgreSQL schema, version 15: usage_records_at_id holds (at,
-- request_id) ascending instead of descending, as in SQLite's migration 15.
-- A gateway's records come with at growing, so an ascending B-tree takes
-- each at its right edge, the page PostgreSQL appends to without a descent
-- (its rightmost-leaf fast path), where the descending one took each at its
-- left edge (in SQLite a usage row 72,176 instructions against 66,409;
-- docs/benchmarks.md, issue 21). Every reader is served as before:
-- a B-tree is scanned either way (the request log's newest-first pages
-- backwards, the export and the prune forwards).

-- +goose Up
DROP INDEX usage_records_at_id;
CREATE INDEX usage_records_at_id ON usage_records (at, request_id);

-- +goose Down
DROP INDEX usage_records_at_id;
CREATE INDEX usage_records_at_id ON usage_records (at DESC, request_id DESC);
