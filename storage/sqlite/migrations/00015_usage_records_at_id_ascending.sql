-- Troupe embedded schema, version 15: usage_records_at_id holds (at,
-- request_id) ascending instead of descending. A gateway's records come
-- with at growing, so an ascending index takes each at its right edge,
-- where SQLite appends to the last page (balance_quick), while the
-- descending one took each at its left edge and rebalanced pages there:
-- a usage row 72,176 instructions against 66,409 (BenchmarkInsertUsageRecorder,
-- callgrind; docs/benchmarks.md, issue 21, "the closed loop's budget at
-- saturation"). Every reader is served as before: SQLite walks an index
-- either way (the request log's newest-first pages backwards, the export
-- and the prune forwards).

-- +goose Up
DROP INDEX usage_records_at_id;
CREATE INDEX usage_records_at_id ON usage_records (at, request_id);

-- +goose Down
DROP INDEX usage_records_at_id;
CREATE INDEX usage_records_at_id ON usage_records (at DESC, request_id DESC);
