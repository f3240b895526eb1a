-- The rows a range re-read (cdc-sql resnapshot --where) did not return although they match its
-- predicate here: the source deleted them. Each becomes a delete of its key at the read's
-- watermark (every binlog change after it wins over it), at the time of the read (a replay
-- gives the same rows). Taken from silver's live rows and from history's current versions, so
-- a replay after silver's MERGE still ends those versions.
SELECT
  {{ columns }},
  :{{ at }} AS _cdc_offset,
  'd' AS _cdc_op,
  CAST({{ read_at }} AS TIMESTAMP) AS _cdc_ts,
  :{{ source }} AS _cdc_source_table,
  CAST(NULL AS STRING) AS _cdc_attempt,
  TRUE AS _cdc_remove{{ extra }}
FROM (SELECT * FROM ({{ rows }}) AS r WHERE {{ predicate }}) AS t
LEFT ANTI JOIN {{ candidates }} AS c
  ON {{ key_match }} AND c._cdc_offset = :{{ at }} AND c._cdc_op = 'r'
