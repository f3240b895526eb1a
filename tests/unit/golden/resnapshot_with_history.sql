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

-- step 6: cdc_changes_orders: the last candidate per key, staged in /lake/_staging/orders (when no key has two candidates, the candidates as they are)
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

-- step 7: history given the source's columns and types (old versions cast)
-- rows: []

-- step 8: cdc_versions_orders: the rows that differ from history's current versions, staged in /lake/_staging/orders_history
--   :upto = '000003:000000000200:000000'
-- The history versions of a re-snapshot: a key whose new row differs from its current version
-- gets a version from the new row's offset on, and the version current before ends there (at
-- :upto, when the re-snapshot no longer finds the key). Keys whose row is the same keep their
-- version, so a replayed re-snapshot adds nothing.
WITH fresh AS (
  SELECT * FROM `cdc_changes_orders` WHERE NOT _cdc_remove
), current_versions AS (
  SELECT * FROM delta.`/lake/silver/orders_history` WHERE _cdc_current
)
SELECT
  f.`id`, f.`status`, f.`amount`, f.`placed`, f.`_cdc_key_placed`,
  f._cdc_op,
  f._cdc_offset AS _cdc_valid_from,
  f._cdc_ts AS _cdc_valid_from_ts,
  CAST(NULL AS STRING) AS _cdc_valid_to,
  CAST(NULL AS TIMESTAMP) AS _cdc_valid_to_ts,
  TRUE AS _cdc_current,
  FALSE AS _cdc_closes
FROM fresh AS f
LEFT ANTI JOIN current_versions AS h ON h.`id` = f.`id` AND h.`_cdc_key_placed` = f.`_cdc_key_placed` AND h.`id` <=> f.`id` AND h.`status` <=> f.`status` AND h.`amount` <=> f.`amount` AND h.`placed` <=> f.`placed` AND h.`_cdc_key_placed` <=> f.`_cdc_key_placed`
UNION ALL
SELECT
  h.`id`, h.`status`, h.`amount`, h.`placed`, h.`_cdc_key_placed`,
  h._cdc_op,
  h._cdc_valid_from,
  h._cdc_valid_from_ts,
  COALESCE(f._cdc_offset, :upto) AS _cdc_valid_to,
  COALESCE(f._cdc_ts, CAST(current_timestamp() AS TIMESTAMP)) AS _cdc_valid_to_ts,
  FALSE AS _cdc_current,
  TRUE AS _cdc_closes
FROM current_versions AS h
LEFT JOIN fresh AS f ON h.`id` = f.`id` AND h.`_cdc_key_placed` = f.`_cdc_key_placed`
WHERE f._cdc_offset IS NULL OR NOT (h.`id` <=> f.`id` AND h.`status` <=> f.`status` AND h.`amount` <=> f.`amount` AND h.`placed` <=> f.`placed` AND h.`_cdc_key_placed` <=> f.`_cdc_key_placed`)

-- step 9: the MERGE into history
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

-- step 10: silver replaced by the re-snapshot's rows, in one commit
-- What silver holds after a re-snapshot: the last candidate of every key that it does not
-- remove (the new splits' rows at their watermarks, and the binlog changes after them), and
-- what the table's change semantics keep of the old rows (lake/semantics.py).
SELECT `id`, `status`, `amount`, `placed`, `_cdc_offset`, `_cdc_op`, `_cdc_ts`, `_cdc_key_placed`
FROM `cdc_changes_orders`
WHERE NOT _cdc_remove
