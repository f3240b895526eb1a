-- A re-snapshot's history versions when history tracks chosen columns: a key whose new row
-- differs from its current version in a tracked column gets a version from the new row's
-- offset on, and the version current before ends there (at :upto, when the re-snapshot no
-- longer finds the key); one whose tracked columns are the same updates its current version in
-- place, when the row is from a later change than the version holds (as silver's row is); so a
-- replayed re-snapshot changes nothing.
WITH fresh AS (
  SELECT * FROM {{ changes }} WHERE NOT _cdc_remove
), current_versions AS (
  SELECT * FROM {{ history }} WHERE _cdc_current
)
SELECT
  {{ columns }},
  f._cdc_op,
  f._cdc_offset AS _cdc_valid_from,
  f._cdc_ts AS _cdc_valid_from_ts,
  CAST(NULL AS STRING) AS _cdc_valid_to,
  CAST(NULL AS TIMESTAMP) AS _cdc_valid_to_ts,
  TRUE AS _cdc_current,
  f._cdc_offset,
  f._cdc_ts,
  FALSE AS _cdc_closes
FROM fresh AS f
LEFT ANTI JOIN current_versions AS h ON {{ key_match }} AND {{ tracked_same }}
UNION ALL
-- tracked columns the same: the current version takes the new row in place
SELECT
  {{ columns }},
  h._cdc_op,
  h._cdc_valid_from,
  h._cdc_valid_from_ts,
  CAST(NULL AS STRING),
  CAST(NULL AS TIMESTAMP),
  TRUE,
  f._cdc_offset,
  f._cdc_ts,
  TRUE
FROM fresh AS f
JOIN current_versions AS h ON {{ key_match }} AND {{ tracked_same }}
WHERE f._cdc_offset > COALESCE(h._cdc_offset, '')
UNION ALL
SELECT
  {{ history_columns }},
  h._cdc_op,
  h._cdc_valid_from,
  h._cdc_valid_from_ts,
  COALESCE(f._cdc_offset, :upto),
  COALESCE(f._cdc_ts, CAST(current_timestamp() AS TIMESTAMP)),
  FALSE,
  h._cdc_offset,
  h._cdc_ts,
  TRUE
FROM current_versions AS h
LEFT JOIN fresh AS f ON {{ key_match }}
WHERE f._cdc_offset IS NULL OR NOT ({{ tracked_same }})
