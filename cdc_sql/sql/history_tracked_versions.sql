-- The rows a batch adds to or changes in <name>_history when history tracks chosen columns
-- (`history: {track: [...]}` / `{except: [...]}`, AUTO CDC's TRACK HISTORY ON). A key's changes,
-- after the version it had just before the first of them, are cut into runs: a run starts where
-- a tracked column changes (or the key appears again) and ends at the next start or delete.
-- Each run is one version: from its first change, holding the values of its last one
-- (`_cdc_offset`, `_cdc_ts`), as if the changes were applied one by one. The version before the
-- window is found by its span, not by being current, so a replay after history moved on cuts
-- the same runs; where no attempt of the batch reached history it is a current one (`current`).
WITH firsts AS (
  SELECT {{ key }}, MIN(_cdc_offset) AS _cdc_first FROM {{ candidates }} GROUP BY {{ key }}
), changes AS (
  SELECT
    {{ columns }},
    _cdc_offset, _cdc_op, _cdc_ts, _cdc_remove,
    _cdc_offset AS _cdc_held, _cdc_ts AS _cdc_held_ts, FALSE AS _cdc_before
  FROM {{ candidates }}
  UNION ALL
  -- the version each key had just before its first change in the window
  SELECT
    {{ history_columns }},
    h._cdc_valid_from, h._cdc_op, h._cdc_valid_from_ts, FALSE,
    COALESCE(h._cdc_offset, h._cdc_valid_from), h._cdc_ts, TRUE
  FROM {{ history }} AS h
  JOIN firsts AS f ON {{ key_match }}
  WHERE {{ current }}h._cdc_valid_from < f._cdc_first AND (h._cdc_valid_to IS NULL OR h._cdc_valid_to >= f._cdc_first)
), starts AS (
  SELECT
    *,
    NOT _cdc_remove AND (
      COALESCE(LAG(_cdc_remove) OVER (PARTITION BY {{ key }} ORDER BY _cdc_offset, _cdc_remove DESC), TRUE)
      OR NOT ({{ same }})
    ) AS _cdc_opens
  FROM changes
), runs AS (
  SELECT
    *,
    SUM(CASE WHEN _cdc_opens OR _cdc_remove THEN 1 ELSE 0 END) OVER (
      PARTITION BY {{ key }} ORDER BY _cdc_offset, _cdc_remove DESC
      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _cdc_run
  FROM starts
), bounds AS (
  -- each run's first change, and where the next run starts (a version's end)
  SELECT
    {{ key }}, _cdc_run, _cdc_offset, _cdc_op, _cdc_ts, _cdc_remove, _cdc_before,
    LEAD(_cdc_offset) OVER (PARTITION BY {{ key }} ORDER BY _cdc_run) AS _cdc_next,
    LEAD(_cdc_ts) OVER (PARTITION BY {{ key }} ORDER BY _cdc_run) AS _cdc_next_ts
  FROM runs
  WHERE _cdc_opens OR _cdc_remove
), lasts AS (
  SELECT
    *,
    ROW_NUMBER() OVER (PARTITION BY {{ key }}, _cdc_run ORDER BY _cdc_offset DESC, _cdc_remove) AS _cdc_back
  FROM runs
)
SELECT
  {{ last_columns }},
  b._cdc_op,
  b._cdc_offset AS _cdc_valid_from,
  b._cdc_ts AS _cdc_valid_from_ts,
  b._cdc_next AS _cdc_valid_to,
  b._cdc_next_ts AS _cdc_valid_to_ts,
  b._cdc_next IS NULL AS _cdc_current,
  l._cdc_held AS _cdc_offset,
  l._cdc_held_ts AS _cdc_ts,
  b._cdc_before AS _cdc_closes
FROM bounds AS b
JOIN lasts AS l ON {{ run_match }} AND l._cdc_run = b._cdc_run AND l._cdc_back = 1
WHERE NOT b._cdc_remove
