-- Silver's rows as the window began (its version state recorded with the applied offset), as
-- images: where the foreign-key cascades of the window start from.
SELECT
  {{ columns }},
  _cdc_offset,
  'r' AS _cdc_op,
  _cdc_ts,
  :source_table AS _cdc_source_table,
  FALSE AS _cdc_deleted,
  CAST(NULL AS STRING) AS _cdc_attempt
FROM {{ silver }}{{ live }}
