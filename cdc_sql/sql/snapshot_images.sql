-- Rows of the snapshot splits being merged, each placed at its split's watermark.
-- Only the attempt that state marks done is read; the watermark comes from state too
-- ({{ done_splits }}: split_id, attempt, watermark), as GTID watermarks are resolved later.
SELECT
  {{ columns }},
  d.watermark AS _cdc_offset,
  'r' AS _cdc_op,
  b._cdc_read_at AS _cdc_ts,
  :source_table AS _cdc_source_table,
  FALSE AS _cdc_deleted,
  b._cdc_attempt
FROM {{ bronze_snapshot }} AS b
JOIN {{ done_splits }} AS d
  ON b._cdc_split_id = d.split_id AND b._cdc_attempt = d.attempt
