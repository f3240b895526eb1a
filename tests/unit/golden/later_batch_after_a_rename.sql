-- step 1: cdc_images_orders_0_b: binlog changes of shop.orders
--   :source_table = 'shop.orders'
--   :after = '000002:000000000100:000000'
--   :upto = '000003:000000000200:000000'
--   :rename_0 = '000002:000000000150:000000'
-- Binlog changes of one source table in the window (:after, :upto], as bronze holds them: one
-- typed row per change (the after-image; a delete's before-image, for its key). Columns renamed
-- in the window read their earlier name for rows written before the rename; columns bronze has
-- not seen yet are NULL.
SELECT
  `id` AS `id`,
  CAST(CASE WHEN _cdc_offset < :rename_0 THEN `state` ELSE `status` END AS STRING) AS `status`,
  CAST(`amount` AS DECIMAL(10,2)) AS `amount`,
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
WHEN MATCHED AND s._cdc_offset > t._cdc_offset THEN UPDATE SET t.`id` = s.`id`, t.`status` = s.`status`, t.`amount` = s.`amount`, t.`placed` = s.`placed`, t.`_cdc_offset` = s.`_cdc_offset`, t.`_cdc_op` = s.`_cdc_op`, t.`_cdc_ts` = s.`_cdc_ts`, t.`_cdc_key_placed` = s.`_cdc_key_placed`, t.`dropped_col` = NULL
WHEN NOT MATCHED AND NOT s._cdc_remove THEN INSERT (`id`, `status`, `amount`, `placed`, `_cdc_offset`, `_cdc_op`, `_cdc_ts`, `_cdc_key_placed`) VALUES (s.`id`, s.`status`, s.`amount`, s.`placed`, s.`_cdc_offset`, s.`_cdc_op`, s.`_cdc_ts`, s.`_cdc_key_placed`)
