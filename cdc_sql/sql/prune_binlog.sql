-- Bronze binlog rows that every silver table has applied ({{ applied }}: the lowest applied
-- offset) and that committed before the retention cutoff ({{ cutoff_micros }}: epoch us, UTC).
DELETE FROM {{ bronze_binlog }}
WHERE offset <= {{ applied }}
  AND commit_ts < timestamp_micros({{ cutoff_micros }})
