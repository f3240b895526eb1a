-- Binlog changes of one source table in the window (:after, :upto], typed again.
-- A delete carries its before-image (for the key), every other change its after-image.
-- Images list the columns in table order; while that order is the one expected (in_order),
-- values are taken by position with get() (a map lookup by name costs 8x more on Sail, and
-- `values[i]` 1.8x more than get()).
SELECT
  {{ columns }},
  e.offset AS _cdc_offset,
  e.op AS _cdc_op,
  e.commit_ts AS _cdc_ts,
  {{ source_table }} AS _cdc_source_table,
  e.op = 'd' AS _cdc_deleted
FROM (
  SELECT
    *,
    map_keys(image) = {{ names }} AS in_order,
    map_values(image) AS image_values
  FROM (
    SELECT *, CASE WHEN op = 'd' THEN before ELSE after END AS image
    FROM {{ bronze_binlog }}
    WHERE db = :db AND tbl = :tbl AND op IN ('c', 'u', 'd')
      AND offset > :after AND offset <= :upto
  ) AS changes
) AS e
