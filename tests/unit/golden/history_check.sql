-- verify: silver's live rows against history's current versions, counted each way
-- (ops/history_check.py); the columns are those both tables hold.
WITH silver AS (
  SELECT `id`, `status`
  FROM delta.`/lake/silver/orders`
WHERE NOT COALESCE(_cdc_deleted, FALSE)
),
current_versions AS (
  SELECT `id`, `status`
  FROM delta.`/lake/silver/orders_history`
  WHERE _cdc_current
)
SELECT
  (SELECT COUNT(*) FROM (SELECT * FROM silver EXCEPT ALL SELECT * FROM current_versions) AS m)
    AS missing,
  (SELECT COUNT(*) FROM (SELECT * FROM current_versions EXCEPT ALL SELECT * FROM silver) AS e)
    AS extra
