-- The projection over every candidate image, then the last candidate per key (by offset).
-- A candidate removes its key when it is a delete or when it no longer matches the WHERE.
-- Snapshot rows stand at their split's watermark, so binlog changes at or before it lose to
-- them: this ordering is the watermark filter (DESIGN section 3).
SELECT {{ output }}
FROM (
  SELECT
    *,
    ROW_NUMBER() OVER (PARTITION BY {{ key }} ORDER BY _cdc_offset DESC, _cdc_remove ASC) AS _cdc_rank
  FROM (
    SELECT
      {{ projection }},
      _cdc_offset,
      _cdc_op,
      _cdc_ts,
      _cdc_source_table,
      _cdc_deleted OR NOT COALESCE({{ matches }}, FALSE) AS _cdc_remove
    FROM {{ images }}
  ) AS projected
) AS ranked
WHERE _cdc_rank = 1
