-- The last TRUNCATE of one source table in the window (:after, :upto], if any.
SELECT offset, commit_ts
FROM {{ bronze_binlog }}
WHERE db = :db AND tbl = :tbl AND op = 'truncate' AND offset > :after AND offset <= :upto
ORDER BY offset DESC
LIMIT 1
