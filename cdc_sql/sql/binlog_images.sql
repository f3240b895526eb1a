-- Binlog changes of one source table in the window (:after, :upto], typed again.
-- A delete carries its before-image (for the key), every other change its after-image.
SELECT
  {{ columns }},
  e.offset AS _cdc_offset,
  e.op AS _cdc_op,
  e.commit_ts AS _cdc_ts,
  {{ source_table }} AS _cdc_source_table,
  e.op = 'd' AS _cdc_deleted
FROM (
  SELECT *, CASE WHEN op = 'd' THEN before ELSE after END AS image
  FROM {{ bronze_binlog }}
  WHERE db = :db AND tbl = :tbl AND op IN ('c', 'u', 'd')
    AND offset > :after AND offset <= :upto
) AS e
