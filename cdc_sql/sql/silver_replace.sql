-- What silver holds after a re-snapshot: the last candidate of every key that it does not
-- remove (the new splits' rows at their watermarks, and the binlog changes after them), and
-- what the table's change semantics keep of the old rows (lake/semantics.py).
SELECT {{ columns }}
FROM {{ changes }}
WHERE NOT {{ removes }}{{ kept }}
