-- A parent's deletes and key changes in the window (:after, :upto], whose foreign-key cascades
-- change child rows without a binlog event: its change rows at every offset where a key was
-- deleted (an UPDATE of a key is a delete and an insert at one offset).
SELECT `id`, _cdc_offset, _cdc_op, _cdc_ts
FROM delta.`/lake/bronze/_changes/shop.parent`
WHERE _cdc_offset > :after AND _cdc_offset <= :upto AND _cdc_op IN ('d', 'c')
  AND _cdc_offset IN (SELECT _cdc_offset FROM delta.`/lake/bronze/_changes/shop.parent`
                      WHERE _cdc_offset > :after AND _cdc_offset <= :upto AND _cdc_op = 'd')
-- Silver's rows as the window began (its version state recorded with the applied offset), as
-- images: where the foreign-key cascades of the window start from.
SELECT
  `id`, `parent_id`,
  _cdc_offset,
  'r' AS _cdc_op,
  _cdc_ts,
  :source_table AS _cdc_source_table,
  FALSE AS _cdc_deleted,
  CAST(NULL AS STRING) AS _cdc_attempt
FROM delta.`/lake/silver/child` VERSION AS OF 7
WHERE NOT COALESCE(_cdc_deleted, FALSE)
