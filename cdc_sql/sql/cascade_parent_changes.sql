-- A parent's deletes and key changes in the window (:after, :upto], whose foreign-key cascades
-- change child rows without a binlog event: its change rows at every offset where a key was
-- deleted (an UPDATE of a key is a delete and an insert at one offset).
SELECT {{ key }}, _cdc_offset, _cdc_op, _cdc_ts
FROM {{ bronze_changes }}
WHERE _cdc_offset > :after AND _cdc_offset <= :upto AND _cdc_op IN ('d', 'c')
  AND _cdc_offset IN (SELECT _cdc_offset FROM {{ bronze_changes }}
                      WHERE _cdc_offset > :after AND _cdc_offset <= :upto AND _cdc_op = 'd')
