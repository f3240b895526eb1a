-- The DDL statements and TRUNCATEs bronze holds, and the rows events written with
-- foreign_key_checks=0 (no cascade happened), in order: read once for every table of a merge,
-- each of which takes those of its source tables in its window.
SELECT db, tbl, op, offset, commit_ts, statement
FROM delta.`/lake/bronze/_binlog`
WHERE op IN ('ddl', 'truncate', 'no_fk_checks')
ORDER BY offset
