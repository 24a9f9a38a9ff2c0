-- Troupe embedded schema, version 13: usage_hourly.cost holds integer
-- micro-units of the billing currency, the sum of its records' cost
-- (usage_records.cost, version 8), like every other amount Troupe stores.
-- It was a REAL "USD" that InsertUsage never added to: every row read 0
-- even for requests that were charged. SQLite cannot change a column's
-- type, so the column is replaced by one of type INTEGER under the same
-- name, last as before.

-- +goose Up
ALTER TABLE usage_hourly ADD COLUMN cost_micro INTEGER NOT NULL DEFAULT 0; -- micro-units
-- Any value a row held (none was ever written but 0) is kept, in micro-units.
UPDATE usage_hourly SET cost_micro = CAST(round(cost * 1000000) AS INTEGER) WHERE cost <> 0;
ALTER TABLE usage_hourly DROP COLUMN cost;
ALTER TABLE usage_hourly RENAME COLUMN cost_micro TO cost;

-- The records still stored give their groups' cost, so that the rollups
-- agree with them from the start (the hour rounds down, also before 1970).
-- A group whose records were pruned (PruneUsage) keeps only those still
-- stored, or the value above when none is.
UPDATE usage_hourly SET cost = r.cost
FROM (
    SELECT at - ((at % 3600000) + 3600000) % 3600000 AS hour, key_id, account_id, model, status, sum(cost) AS cost
    FROM usage_records
    GROUP BY 1, 2, 3, 4, 5
) AS r
WHERE usage_hourly.hour = r.hour AND usage_hourly.key_id = r.key_id AND usage_hourly.account_id = r.account_id
    AND usage_hourly.model = r.model AND usage_hourly.status = r.status AND usage_hourly.cost <> r.cost;

-- +goose Down
-- Back to units of the currency, as a REAL.
ALTER TABLE usage_hourly ADD COLUMN cost_units REAL NOT NULL DEFAULT 0;
UPDATE usage_hourly SET cost_units = cost / 1000000.0;
ALTER TABLE usage_hourly DROP COLUMN cost;
ALTER TABLE usage_hourly RENAME COLUMN cost_units TO cost;
