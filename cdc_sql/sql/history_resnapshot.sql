-- The history versions of a re-snapshot: a key whose new row differs from its current version
-- gets a version from the new row's offset on, and the version current before ends there (at
-- :upto, when the re-snapshot no longer finds the key). Keys whose row is the same keep their
-- version, so a replayed re-snapshot adds nothing.
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
  FALSE AS _cdc_closes
FROM fresh AS f
LEFT ANTI JOIN current_versions AS h ON {{ key_match }} AND {{ same }}
UNION ALL
SELECT
  {{ history_columns }},
  h._cdc_op,
  h._cdc_valid_from,
  h._cdc_valid_from_ts,
  COALESCE(f._cdc_offset, :upto) AS _cdc_valid_to,
  COALESCE(f._cdc_ts, CAST(current_timestamp() AS TIMESTAMP)) AS _cdc_valid_to_ts,
  FALSE AS _cdc_current,
  TRUE AS _cdc_closes
FROM current_versions AS h
LEFT JOIN fresh AS f ON {{ key_match }}
WHERE f._cdc_offset IS NULL OR NOT ({{ same }})
