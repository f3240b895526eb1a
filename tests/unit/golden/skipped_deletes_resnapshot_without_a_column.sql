-- step 1: cdc_images_orders_0_splits: the done splits of shop.orders (id, attempt, watermark)
-- rows: [(0, 'b1', '000002:000000000300:000000')]

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

-- step 4: cdc_images_orders: every image of the batch
SELECT * FROM `cdc_images_orders_0_s` UNION ALL SELECT * FROM `cdc_images_orders_0_b`

-- step 5: cdc_candidates_orders: the projection over cdc_images_orders
-- Every candidate image (snapshot rows and binlog changes) after the projection.
-- A candidate removes its key when it is a delete or when it no longer matches the WHERE.
-- The table's change semantics (lake/semantics.py) may add a column (soft deletes' flag) and
-- choose the images that are candidates at all (skipped deletes are not).
SELECT
  `id` AS `id`,
  `status` AS `status`,
  `placed` AS `placed`,
  `_cdc_key_placed` AS `_cdc_key_placed`,
  _cdc_offset,
  _cdc_op,
  _cdc_ts,
  _cdc_source_table,
  _cdc_attempt,
  _cdc_deleted OR NOT COALESCE(TRUE, FALSE) AS _cdc_remove
FROM `cdc_images_orders`
WHERE NOT _cdc_deleted

-- step 6: cdc_changes_orders: the last candidate per key, staged in /lake/_staging/orders (when no key has two candidates, the candidates as they are)
-- Whether every key has one candidate in the window (then they are the changes as they are, and
-- the last-change-per-key step and its staging are skipped), and how many there are (none: the
-- MERGE is skipped).
SELECT COUNT(*) = COUNT(DISTINCT `id`, `_cdc_key_placed`), COUNT(*)
FROM `cdc_candidates_orders`
-- when it is true:
SELECT `id`, `status`, `placed`, `_cdc_offset`, `_cdc_op`, `_cdc_ts`, `_cdc_key_placed`, `_cdc_remove` FROM `cdc_candidates_orders`
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
SELECT c.`id`, c.`status`, c.`placed`, c.`_cdc_offset`, c.`_cdc_op`, c.`_cdc_ts`, c.`_cdc_key_placed`, c.`_cdc_remove`
FROM won AS w
JOIN `cdc_candidates_orders` AS c
  ON c.`id` = w.`id` AND c.`_cdc_key_placed` = w.`_cdc_key_placed` AND c._cdc_offset = w._cdc_offset AND c._cdc_remove <=> w._cdc_remove

-- step 7: silver replaced by the re-snapshot's rows, in one commit
-- What silver holds after a re-snapshot: the last candidate of every key that it does not
-- remove (the new splits' rows at their watermarks, and the binlog changes after them), and
-- what the table's change semantics keep of the old rows (lake/semantics.py).
SELECT `id`, `status`, `placed`, `_cdc_offset`, `_cdc_op`, `_cdc_ts`, `_cdc_key_placed`
FROM `cdc_changes_orders`
WHERE NOT _cdc_remove
UNION ALL
-- rows the re-snapshot no longer finds, kept (deletes skipped)
SELECT t.`id`, t.`status`, t.`placed`, t.`_cdc_offset`, t.`_cdc_op`, t.`_cdc_ts`, t.`_cdc_key_placed`
FROM delta.`/lake/silver/orders` AS t
LEFT ANTI JOIN `cdc_changes_orders` AS s ON t.`id` = s.`id` AND t.`_cdc_key_placed` = s.`_cdc_key_placed`
