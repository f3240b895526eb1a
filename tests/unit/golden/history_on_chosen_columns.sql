-- step 1: cdc_images_orders_0_b: binlog changes of shop.orders
--   :source_table = 'shop.orders'
--   :after = '000002:000000000100:000000'
--   :upto = '000003:000000000200:000000'
-- Binlog changes of one source table in the window (:after, :upto], as bronze holds them: one
-- typed row per change (the after-image; a delete's before-image, for its key). Columns renamed
-- in the window read their earlier name for rows written before the rename; columns bronze has
-- not seen yet are NULL.
SELECT
  `id` AS `id`,
  `status` AS `status`,
  `amount` AS `amount`,
  `placed` AS `placed`,
  `_cdc_key_placed` AS `_cdc_key_placed`,
  _cdc_offset,
  _cdc_op,
  _cdc_ts,
  :source_table AS _cdc_source_table,
  _cdc_op = 'd' AS _cdc_deleted,
  CAST(NULL AS STRING) AS _cdc_attempt
FROM delta.`/lake/bronze/_changes/shop.orders`
WHERE _cdc_offset > :after AND _cdc_offset <= :upto

-- step 2: cdc_images_orders: every image of the batch
SELECT * FROM `cdc_images_orders_0_b`

-- step 3: cdc_candidates_orders: the projection over cdc_images_orders
-- Every candidate image (snapshot rows and binlog changes) after the projection.
-- A candidate removes its key when it is a delete or when it no longer matches the WHERE.
-- The table's change semantics (lake/semantics.py) may add a column (soft deletes' flag) and
-- choose the images that are candidates at all (skipped deletes are not).
SELECT
  `id` AS `id`,
  `status` AS `status`,
  `amount` AS `amount`,
  `placed` AS `placed`,
  `_cdc_key_placed` AS `_cdc_key_placed`,
  _cdc_offset,
  _cdc_op,
  _cdc_ts,
  _cdc_source_table,
  _cdc_attempt,
  _cdc_deleted OR NOT COALESCE(TRUE, FALSE) AS _cdc_remove
FROM `cdc_images_orders`

-- step 4: cdc_changes_orders: the last candidate per key, staged in /lake/_staging/orders (when no key has two candidates, the candidates as they are)
-- Whether every key has one candidate in the window (then they are the changes as they are, and
-- the last-change-per-key step and its staging are skipped), and how many there are (none: the
-- MERGE is skipped).
SELECT COUNT(*) = COUNT(DISTINCT `id`, `_cdc_key_placed`), COUNT(*)
FROM `cdc_candidates_orders`
-- when it is true:
SELECT `id`, `status`, `amount`, `placed`, `_cdc_offset`, `_cdc_op`, `_cdc_ts`, `_cdc_key_placed`, `_cdc_remove` FROM `cdc_candidates_orders`
-- else:
-- The last candidate per key (by offset): what silver must hold for that key.
-- Snapshot rows stand at their split's watermark, so binlog changes at or before it lose to
-- them: this ordering is the watermark filter (docs/architecture.md). A candidate loses to a
-- later one of its key (an anti-join, not ROW_NUMBER: 20% faster on Sail; a key has one
-- candidate per offset), found among the keys, offsets and removal flags alone; the winners'
-- rows are then joined back. (Sail builds a join's hash table of its left side: of the whole
-- window's rows, it took twice the memory and 1.8 times as long; docs/performance.md.)
WITH keyed AS (
  SELECT `id`, `_cdc_key_placed`, _cdc_offset, _cdc_remove FROM `cdc_candidates_orders`
),
won AS (
  SELECT DISTINCT c.`id`, c.`_cdc_key_placed`, c.`_cdc_offset`, c.`_cdc_remove`
  FROM keyed AS c
  LEFT ANTI JOIN keyed AS later
    ON c.`id` = later.`id` AND c.`_cdc_key_placed` = later.`_cdc_key_placed`
    AND (later._cdc_offset > c._cdc_offset
         OR later._cdc_offset = c._cdc_offset AND c._cdc_remove AND NOT later._cdc_remove)
)
SELECT c.`id`, c.`status`, c.`amount`, c.`placed`, c.`_cdc_offset`, c.`_cdc_op`, c.`_cdc_ts`, c.`_cdc_key_placed`, c.`_cdc_remove`
FROM won AS w
JOIN `cdc_candidates_orders` AS c
  ON c.`id` = w.`id` AND c.`_cdc_key_placed` = w.`_cdc_key_placed` AND c._cdc_offset = w._cdc_offset AND c._cdc_remove <=> w._cdc_remove

-- step 5: the MERGE into silver (silver and history are first given the source's columns)
-- Apply the last change per key. Offsets only move forward: an older change never overwrites a
-- newer row, so replaying a window (after a crash before the state commit) changes nothing.
-- Whether the last change removes its key is the table's change semantics (a soft delete does
-- not: it updates the row, flagged deleted; lake/semantics.py).
MERGE INTO delta.`/lake/silver/orders` AS t
USING `cdc_changes_orders` AS s
ON t.`id` = s.`id` AND t.`_cdc_key_placed` = s.`_cdc_key_placed`
WHEN MATCHED AND s._cdc_offset > t._cdc_offset AND s._cdc_remove THEN DELETE
WHEN MATCHED AND s._cdc_offset > t._cdc_offset THEN UPDATE SET t.`id` = s.`id`, t.`status` = s.`status`, t.`amount` = s.`amount`, t.`placed` = s.`placed`, t.`_cdc_offset` = s.`_cdc_offset`, t.`_cdc_op` = s.`_cdc_op`, t.`_cdc_ts` = s.`_cdc_ts`, t.`_cdc_key_placed` = s.`_cdc_key_placed`
WHEN NOT MATCHED AND NOT s._cdc_remove THEN INSERT (`id`, `status`, `amount`, `placed`, `_cdc_offset`, `_cdc_op`, `_cdc_ts`, `_cdc_key_placed`) VALUES (s.`id`, s.`status`, s.`amount`, s.`placed`, s.`_cdc_offset`, s.`_cdc_op`, s.`_cdc_ts`, s.`_cdc_key_placed`)

-- step 6: cdc_versions_orders: the history versions, staged in /lake/_staging/orders_history
-- The rows a batch adds to or changes in <name>_history when history tracks chosen columns
-- (`history: {track: [...]}` / `{except: [...]}`, AUTO CDC's TRACK HISTORY ON). A key's changes,
-- after the version it had just before the first of them, are cut into runs: a run starts where
-- a tracked column changes (or the key appears again) and ends at the next start or delete.
-- Each run is one version: from its first change, holding the values of its last one
-- (`_cdc_offset`, `_cdc_ts`), as if the changes were applied one by one. The version before the
-- window is found by its span, not by being current, so a replay after history moved on cuts
-- the same runs; where no attempt of the batch reached history it is a current one (`current`).
WITH firsts AS (
  SELECT `id`, `_cdc_key_placed`, MIN(_cdc_offset) AS _cdc_first FROM `cdc_candidates_orders` GROUP BY `id`, `_cdc_key_placed`
), changes AS (
  SELECT
    `id`, `status`, `amount`, `placed`, `_cdc_key_placed`,
    _cdc_offset, _cdc_op, _cdc_ts, _cdc_remove,
    _cdc_offset AS _cdc_held, _cdc_ts AS _cdc_held_ts, FALSE AS _cdc_before
  FROM `cdc_candidates_orders`
  UNION ALL
  -- the version each key had just before its first change in the window
  SELECT
    h.`id`, h.`status`, h.`amount`, h.`placed`, h.`_cdc_key_placed`,
    h._cdc_valid_from, h._cdc_op, h._cdc_valid_from_ts, FALSE,
    COALESCE(h._cdc_offset, h._cdc_valid_from), h._cdc_ts, TRUE
  FROM delta.`/lake/silver/orders_history` AS h
  JOIN firsts AS f ON h.`id` = f.`id` AND h.`_cdc_key_placed` = f.`_cdc_key_placed`
  WHERE h._cdc_valid_from < f._cdc_first AND (h._cdc_valid_to IS NULL OR h._cdc_valid_to >= f._cdc_first)
), starts AS (
  SELECT
    *,
    NOT _cdc_remove AND (
      COALESCE(LAG(_cdc_remove) OVER (PARTITION BY `id`, `_cdc_key_placed` ORDER BY _cdc_offset, _cdc_remove DESC), TRUE)
      OR NOT (`status` <=> LAG(`status`) OVER (PARTITION BY `id`, `_cdc_key_placed` ORDER BY _cdc_offset, _cdc_remove DESC))
    ) AS _cdc_opens
  FROM changes
), runs AS (
  SELECT
    *,
    SUM(CASE WHEN _cdc_opens OR _cdc_remove THEN 1 ELSE 0 END) OVER (
      PARTITION BY `id`, `_cdc_key_placed` ORDER BY _cdc_offset, _cdc_remove DESC
      ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _cdc_run
  FROM starts
), bounds AS (
  -- each run's first change, and where the next run starts (a version's end)
  SELECT
    `id`, `_cdc_key_placed`, _cdc_run, _cdc_offset, _cdc_op, _cdc_ts, _cdc_remove, _cdc_before,
    LEAD(_cdc_offset) OVER (PARTITION BY `id`, `_cdc_key_placed` ORDER BY _cdc_run) AS _cdc_next,
    LEAD(_cdc_ts) OVER (PARTITION BY `id`, `_cdc_key_placed` ORDER BY _cdc_run) AS _cdc_next_ts
  FROM runs
  WHERE _cdc_opens OR _cdc_remove
), lasts AS (
  SELECT
    *,
    ROW_NUMBER() OVER (PARTITION BY `id`, `_cdc_key_placed`, _cdc_run ORDER BY _cdc_offset DESC, _cdc_remove) AS _cdc_back
  FROM runs
)
SELECT
  l.`id`, l.`status`, l.`amount`, l.`placed`, l.`_cdc_key_placed`,
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
JOIN lasts AS l ON l.`id` = b.`id` AND l.`_cdc_key_placed` = b.`_cdc_key_placed` AND l._cdc_run = b._cdc_run AND l._cdc_back = 1
WHERE NOT b._cdc_remove

-- step 7: the MERGE into history
-- Versions are keyed by (key, valid_from), so a replayed batch inserts nothing twice; a version
-- only ever gains its end (valid_to), never loses it, and takes a change's values in place only
-- from a later change than the one it holds (`_cdc_offset`; NULL: history kept before columns
-- were chosen). A batch no attempt of which reached history matches current versions only
-- (`current`: history is partitioned by them).
MERGE INTO delta.`/lake/silver/orders_history` AS t
USING `cdc_versions_orders` AS s
ON t.`id` = s.`id` AND t.`_cdc_key_placed` = s.`_cdc_key_placed` AND t._cdc_valid_from = s._cdc_valid_from
WHEN MATCHED AND s._cdc_offset > COALESCE(t._cdc_offset, '') THEN UPDATE SET
  t.`status` = s.`status`, t.`amount` = s.`amount`, t.`placed` = s.`placed`,
  t._cdc_offset = s._cdc_offset,
  t._cdc_ts = s._cdc_ts,
  t._cdc_valid_to = CASE WHEN t._cdc_current THEN s._cdc_valid_to ELSE t._cdc_valid_to END,
  t._cdc_valid_to_ts = CASE WHEN t._cdc_current THEN s._cdc_valid_to_ts ELSE t._cdc_valid_to_ts END,
  t._cdc_current = t._cdc_current AND s._cdc_current
WHEN MATCHED AND s._cdc_valid_to IS NOT NULL AND t._cdc_current THEN UPDATE SET
  t._cdc_valid_to = s._cdc_valid_to,
  t._cdc_valid_to_ts = s._cdc_valid_to_ts,
  t._cdc_current = FALSE
WHEN NOT MATCHED AND NOT s._cdc_closes THEN INSERT (`id`, `status`, `amount`, `placed`, `_cdc_key_placed`, `_cdc_op`, `_cdc_valid_from`, `_cdc_valid_from_ts`, `_cdc_valid_to`, `_cdc_valid_to_ts`, `_cdc_current`, `_cdc_offset`, `_cdc_ts`) VALUES (s.`id`, s.`status`, s.`amount`, s.`placed`, s.`_cdc_key_placed`, s.`_cdc_op`, s.`_cdc_valid_from`, s.`_cdc_valid_from_ts`, s.`_cdc_valid_to`, s.`_cdc_valid_to_ts`, s.`_cdc_current`, s.`_cdc_offset`, s.`_cdc_ts`)
