-- Apply the last change per key. Offsets only move forward: an older change never overwrites a
-- newer row, so replaying a window (after a crash before the state commit) changes nothing.
-- Whether the last change removes its key is the table's change semantics (a soft delete does
-- not: it updates the row, flagged deleted; lake/semantics.py).
MERGE INTO {{ silver }} AS t
USING {{ changes }} AS s
ON {{ key_match }}
WHEN MATCHED AND s._cdc_offset > t._cdc_offset AND {{ removes }} THEN DELETE
WHEN MATCHED AND s._cdc_offset > t._cdc_offset THEN UPDATE SET {{ assignments }}
WHEN NOT MATCHED AND NOT {{ removes }} THEN INSERT ({{ columns }}) VALUES ({{ values }})
