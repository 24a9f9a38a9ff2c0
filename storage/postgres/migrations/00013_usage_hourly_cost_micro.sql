-- Troupe PostgreSQL schema, version 13: usage_hourly.cost holds integer
-- micro-units of the billing currency, the sum of its records' cost
-- (usage_records.cost, version 8), like every other amount Troupe stores.
-- It was a double precision "USD" that InsertUsage never added to: every
-- row read 0 even for requests that were charged.

-- +goose Up
-- Any value a row held (none was ever written but 0) is kept, in micro-units.
ALTER TABLE usage_hourly ALTER COLUMN cost TYPE bigint USING round(cost * 1000000)::bigint;

-- The records still stored give their groups' cost, so that the rollups
-- agree with them from the start. A group whose records were pruned
-- (PruneUsage) keeps only those still stored, or the value above when none is.
UPDATE usage_hourly AS h SET cost = r.cost
FROM (
    SELECT date_trunc('hour', at, 'UTC') AS hour, key_id, account_id, model, status, sum(cost) AS cost
    FROM usage_records
    GROUP BY 1, 2, 3, 4, 5
) AS r
WHERE h.hour = r.hour AND h.key_id = r.key_id AND h.account_id = r.account_id
    AND h.model = r.model AND h.status = r.status AND h.cost <> r.cost;

-- +goose Down
-- Back to units of the currency, as a double precision.
ALTER TABLE usage_hourly ALTER COLUMN cost TYPE double precision USING cost / 1000000.0;
