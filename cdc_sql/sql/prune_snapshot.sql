-- Bronze snapshot rows of a table whose silver already holds its snapshot, read before the
-- retention cutoff ({{ cutoff_micros }}: epoch microseconds, UTC).
DELETE FROM {{ bronze_snapshot }}
WHERE _cdc_read_at < timestamp_micros({{ cutoff_micros }})
