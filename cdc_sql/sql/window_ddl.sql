-- The DDL statements that changed one source table in the window (:after, :upto], in order.
SELECT offset, statement
FROM {{ bronze_binlog }}
WHERE db = :db AND tbl = :tbl AND op = 'ddl' AND offset > :after AND offset <= :upto
ORDER BY offset
