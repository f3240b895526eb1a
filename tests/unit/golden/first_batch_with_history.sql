-- step 1: cdc_images_orders_0_splits: the done splits of shop.orders (id, attempt, watermark)
-- rows: [(0, 'a1', '000001:000000000004:000000'), (1, 'a2', '000001:000000000090:000000')]

-- step 2: cdc_images_orders_0_s: snapshot rows of shop.orders
--   :source_table = 'shop.orders'
-- Rows of the snapshot splits being merged, each placed at its split's watermark.
-- Only the attempt that state marks done is read; the watermark comes from state too
-- (`cdc_images_orders_0_splits`: split_id, attempt, watermark), as GTID watermarks are resolved later.
SELECT
  b.`id` AS `id`,
  b.`status` AS `status`,
  b.`amount` AS `amount`,
  b.`placed` AS `placed`,
  b.`_cdc_key_placed` AS `_cdc_key_placed`,
  d.watermark AS _cdc_offset,
  'r' AS _cdc_op,
  b._cdc_read_at AS _cdc_ts,
  :source_table AS _cdc_source_table,
  FALSE AS _cdc_deleted,
  b._cdc_attempt
FROM delta.`/lake/bronze/_snapshot/shop.orders` AS b
JOIN `cdc_images_orders_0_splits` AS d
  ON b._cdc_split_id = d.split_id AND b._cdc_attempt = d.attempt

-- step 3: cdc_images_orders_0_b: binlog changes of shop.orders
--   :source_table = 'shop.orders'
--   :after = ''
--   :upto = '000002:000000000100:000000'
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

-- step 4: cdc_images_orders: every image of the batch
SELECT * FROM `cdc_images_orders_0_s` UNION ALL SELECT * FROM `cdc_images_orders_0_b`

-- step 5: cdc_candidates_orders: the projection over cdc_images_orders
-- Every candidate image (snapshot rows and binlog changes) after the projection.
-- A candidate removes its key when it is a delete or when it no longer matches the WHERE.
-- The table's change semantics (lake/semantics.py) may add a column (soft deletes' flag) and
-- choose the images that are candidates at all (skipped deletes are not).
SELECT
  `id` AS `id`,
  UPPER(`status`) AS `status`,
  `amount` AS `amount`,
  `placed` AS `placed`,
  `_cdc_key_placed` AS `_cdc_key_placed`,
  _cdc_offset,
  _cdc_op,
  _cdc_ts,
  _cdc_source_table,
  _cdc_attempt,
  _cdc_deleted OR NOT COALESCE(`amount` > 0, FALSE) AS _cdc_remove
FROM `cdc_images_orders`

-- step 6: the snapshot rows, written into silver as it is created (first batch only)
--   :group_0 = 'a1'
--   :group_1 = 'a2'
-- The first batch writes the snapshot rows into silver as they are: each key has at most one
-- snapshot row (splits are disjoint key ranges), placed at its split's watermark. Rows the
-- projection's WHERE leaves out stay behind as candidates (silver_snapshot_rest.sql).
SELECT `id`, `status`, `amount`, `placed`, `_cdc_offset`, `_cdc_op`, `_cdc_ts`, `_cdc_key_placed`
FROM `cdc_candidates_orders`
WHERE _cdc_op = 'r' AND NOT _cdc_remove AND _cdc_attempt = :group_0

UNION ALL
SELECT `id`, `status`, `amount`, `placed`, `_cdc_offset`, `_cdc_op`, `_cdc_ts`, `_cdc_key_placed`
FROM `cdc_candidates_orders`
WHERE _cdc_op = 'r' AND NOT _cdc_remove AND _cdc_attempt = :group_1

-- step 7: cdc_rest_orders: what is left to MERGE after the snapshot rows
-- What the first batch still MERGEs after writing the snapshot rows: the binlog changes, and
-- the snapshot rows the WHERE left out (at their watermark, they outrank their key's older
-- changes, as when every candidate went through one MERGE). The MERGE's offset guard lets a
-- written row's later changes win, and only those.
SELECT *
FROM `cdc_candidates_orders`
WHERE NOT (_cdc_op = 'r' AND NOT _cdc_remove)

-- step 8: cdc_changes_orders: the last candidate per key, staged in /lake/_staging/orders (when no key has two candidates, the candidates as they are)
-- Whether every key has one candidate in the window (then they are the changes as they are, and
-- the last-change-per-key step and its staging are skipped), and how many there are (none: the
-- MERGE is skipped).
SELECT COUNT(*) = COUNT(DISTINCT `id`, `_cdc_key_placed`), COUNT(*)
FROM `cdc_rest_orders`
-- when it is true:
SELECT `id`, `status`, `amount`, `placed`, `_cdc_offset`, `_cdc_op`, `_cdc_ts`, `_cdc_key_placed`, `_cdc_remove` FROM `cdc_rest_orders`
-- else:
-- The last candidate per key (by offset): what silver must hold for that key.
-- Snapshot rows stand at their split's watermark, so binlog changes at or before it lose to
-- them: this ordering is the watermark filter (docs/architecture.md). A candidate loses to a
-- later one of its key (an anti-join, not ROW_NUMBER: 20% faster on Sail; a key has one
-- candidate per offset), found among the keys, offsets and removal flags alone; the winners'
-- rows are then joined back. (Sail builds a join's hash table of its left side: of the whole
-- window's rows, it took twice the memory and 1.8 times as long; docs/performance.md.)
WITH keyed AS (
  SELECT `id`, `_cdc_key_placed`, _cdc_offset, _cdc_remove FROM `cdc_rest_orders`
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
JOIN `cdc_rest_orders` AS c
  ON c.`id` = w.`id` AND c.`_cdc_key_placed` = w.`_cdc_key_placed` AND c._cdc_offset = w._cdc_offset AND c._cdc_remove <=> w._cdc_remove

-- step 9: the MERGE into silver (silver and history are first given the source's columns)
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

-- step 10: cdc_versions_orders: the history versions, staged in /lake/_staging/orders_history
-- The rows a batch adds to <name>_history (SCD type 2): every candidate of the batch (all after
-- the applied offset; history begins as a copy of silver once the first batch has reached past
-- every split's read). A version lasts from its change to the key's next change; valid_to NULL
-- means current.
WITH spans AS (
  SELECT
    *,
    LEAD(_cdc_offset) OVER (PARTITION BY `id`, `_cdc_key_placed` ORDER BY _cdc_offset, _cdc_remove DESC) AS _cdc_next,
    LEAD(_cdc_ts) OVER (PARTITION BY `id`, `_cdc_key_placed` ORDER BY _cdc_offset, _cdc_remove DESC) AS _cdc_next_ts,
    ROW_NUMBER() OVER (PARTITION BY `id`, `_cdc_key_placed` ORDER BY _cdc_offset, _cdc_remove DESC) AS _cdc_nth
  FROM `cdc_candidates_orders`
)
SELECT
  `id`, `status`, `amount`, `placed`, `_cdc_key_placed`,
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
  h.`id`, h.`status`, h.`amount`, h.`placed`, h.`_cdc_key_placed`,
  h._cdc_op,
  h._cdc_valid_from,
  h._cdc_valid_from_ts,
  f._cdc_offset AS _cdc_valid_to,
  f._cdc_ts AS _cdc_valid_to_ts,
  FALSE AS _cdc_current,
  TRUE AS _cdc_closes
FROM delta.`/lake/silver/orders_history` AS h
JOIN spans AS f ON h.`id` = f.`id` AND h.`_cdc_key_placed` = f.`_cdc_key_placed` AND f._cdc_nth = 1
WHERE h._cdc_current AND h._cdc_valid_from < f._cdc_offset

-- step 11: the MERGE into history
-- Versions are keyed by (key, valid_from), so a replayed batch inserts nothing twice; a version
-- only ever gains its end (valid_to), never loses it. A batch no attempt of which reached
-- history matches current versions only (`current`: history is partitioned by them).
MERGE INTO delta.`/lake/silver/orders_history` AS t
USING `cdc_versions_orders` AS s
ON t.`id` = s.`id` AND t.`_cdc_key_placed` = s.`_cdc_key_placed` AND t._cdc_valid_from = s._cdc_valid_from
WHEN MATCHED AND s._cdc_valid_to IS NOT NULL AND t._cdc_current THEN UPDATE SET
  t._cdc_valid_to = s._cdc_valid_to,
  t._cdc_valid_to_ts = s._cdc_valid_to_ts,
  t._cdc_current = FALSE
WHEN NOT MATCHED AND NOT s._cdc_closes THEN INSERT (`id`, `status`, `amount`, `placed`, `_cdc_key_placed`, `_cdc_op`, `_cdc_valid_from`, `_cdc_valid_from_ts`, `_cdc_valid_to`, `_cdc_valid_to_ts`, `_cdc_current`) VALUES (s.`id`, s.`status`, s.`amount`, s.`placed`, s.`_cdc_key_placed`, s.`_cdc_op`, s.`_cdc_valid_from`, s.`_cdc_valid_from_ts`, s.`_cdc_valid_to`, s.`_cdc_valid_to_ts`, s.`_cdc_current`)
