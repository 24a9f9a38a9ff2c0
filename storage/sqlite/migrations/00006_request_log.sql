-- Troupe embedded schema, version 6: the request log keeps each request's
-- routing decision and its failed upstream attempts; API keys get a
-- fair-queue weight. Times are unix milliseconds (UTC). Table and column
-- names are stable: operators query them.

-- +goose Up
ALTER TABLE usage_records ADD COLUMN decision TEXT NOT NULL DEFAULT ''; -- compact decision trace (docs/policies.md#decision-traces)
ALTER TABLE api_keys ADD COLUMN weight INTEGER NOT NULL DEFAULT 1;      -- fair-queue weight of the key's waiters (>= 1)

-- One row per failed upstream attempt, written by InsertUsage with the
-- request's usage record (failed attempts are never billed).
CREATE TABLE error_events (
    request_id TEXT    NOT NULL,            -- usage_records.request_id of the request
    attempt    INTEGER NOT NULL,            -- 1-based attempt number within the request
    at         INTEGER NOT NULL,            -- unix ms when the attempt ended
    account_id TEXT    NOT NULL DEFAULT '',
    class      TEXT    NOT NULL DEFAULT '', -- failure class: quota, rate, auth, banned, transient, …
    status     INTEGER NOT NULL DEFAULT 0,  -- upstream HTTP status (0: no HTTP answer)
    latency_us INTEGER NOT NULL DEFAULT 0,  -- attempt start to failure
    PRIMARY KEY (request_id, attempt)
);
CREATE INDEX error_events_at ON error_events (at);

-- +goose Down
DROP TABLE error_events;
ALTER TABLE api_keys DROP COLUMN weight;
ALTER TABLE usage_records DROP COLUMN decision;
