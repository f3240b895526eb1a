-- Apply the last change per key. Offsets only move forward: an older change never overwrites a
-- newer row, so replaying a window (after a crash before the state commit) changes nothing.
MERGE INTO {{ silver }} AS t
USING {{ changes }} AS s
ON {{ key_match }}
WHEN MATCHED AND s._cdc_offset > t._cdc_offset AND s._cdc_remove THEN DELETE
WHEN MATCHED AND s._cdc_offset > t._cdc_offset THEN UPDATE SET {{ assignments }}
WHEN NOT MATCHED AND NOT s._cdc_remove THEN INSERT ({{ columns }}) VALUES ({{ values }})
