-- The last candidate per key (by offset): what silver must hold for that key.
-- Snapshot rows stand at their split's watermark, so binlog changes at or before it lose to
-- them: this ordering is the watermark filter (DESIGN section 3).
SELECT {{ output }}
FROM (
  SELECT
    *,
    ROW_NUMBER() OVER (PARTITION BY {{ key }} ORDER BY _cdc_offset DESC, _cdc_remove ASC) AS _cdc_rank
  FROM {{ candidates }}
) AS ranked
WHERE _cdc_rank = 1
