-- What silver holds after a re-snapshot: the last candidate of every key that it does not
-- remove (the new splits' rows at their watermarks, and the binlog changes after them).
SELECT {{ columns }}
FROM {{ changes }}
WHERE NOT _cdc_remove
