-- The DDL statements and TRUNCATEs that changed one source table in the window (:after, :upto],
-- in order.
SELECT op, offset, commit_ts, statement
FROM delta.`/lake/bronze/_binlog`
WHERE db = :db AND tbl = :tbl AND op IN ('ddl', 'truncate') AND offset > :after AND offset <= :upto
ORDER BY offset
