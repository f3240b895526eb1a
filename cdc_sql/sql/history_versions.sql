-- The rows a batch adds to <name>_history (SCD type 2): every candidate of the batch (all after
-- the applied offset; history begins as a copy of silver once the first batch has reached past
-- every split's read). A version lasts from its change to the key's next change; valid_to NULL
-- means current.
WITH spans AS (
  SELECT
    *,
    LEAD(_cdc_offset) OVER (PARTITION BY {{ key }} ORDER BY _cdc_offset, _cdc_remove DESC) AS _cdc_next,
    LEAD(_cdc_ts) OVER (PARTITION BY {{ key }} ORDER BY _cdc_offset, _cdc_remove DESC) AS _cdc_next_ts,
    ROW_NUMBER() OVER (PARTITION BY {{ key }} ORDER BY _cdc_offset, _cdc_remove DESC) AS _cdc_nth
  FROM {{ candidates }}
)
SELECT
  {{ columns }},
  _cdc_op,
  _cdc_offset AS _cdc_valid_from,
  _cdc_ts AS _cdc_valid_from_ts,
  _cdc_next AS _cdc_valid_to,
  _cdc_next_ts AS _cdc_valid_to_ts,
  _cdc_next IS NULL AS _cdc_current,
  FALSE AS _cdc_closes
FROM spans
WHERE NOT _cdc_remove
UNION ALL
-- The version that was current before this batch ends at the key's first change in it.
SELECT
  {{ history_columns }},
  h._cdc_op,
  h._cdc_valid_from,
  h._cdc_valid_from_ts,
  f._cdc_offset AS _cdc_valid_to,
  f._cdc_ts AS _cdc_valid_to_ts,
  FALSE AS _cdc_current,
  TRUE AS _cdc_closes
FROM {{ history }} AS h
JOIN spans AS f ON {{ key_match }} AND f._cdc_nth = 1
WHERE h._cdc_current AND h._cdc_valid_from < f._cdc_offset
