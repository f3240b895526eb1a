-- The DDL statements and TRUNCATEs bronze holds, in order: read once for every table of a
-- merge, each of which takes those of its source tables in its window.
SELECT db, tbl, op, offset, commit_ts, statement
FROM delta.`/lake/bronze/_binlog`
WHERE op IN ('ddl', 'truncate')
ORDER BY offset
