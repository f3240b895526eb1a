-- Versions are keyed by (key, valid_from), so a replayed batch inserts nothing twice; a version
-- only ever gains its end (valid_to), never loses it, and takes a change's values in place only
-- from a later change than the one it holds (`_cdc_offset`; NULL: history kept before columns
-- were chosen). A batch no attempt of which reached history matches current versions only
-- (`current`: history is partitioned by them).
MERGE INTO {{ history }} AS t
USING {{ versions }} AS s
ON {{ key_match }} AND t._cdc_valid_from = s._cdc_valid_from{{ current }}
WHEN MATCHED AND s._cdc_offset > COALESCE(t._cdc_offset, '') THEN UPDATE SET
  {{ assignments }},
  t._cdc_offset = s._cdc_offset,
  t._cdc_ts = s._cdc_ts,
  t._cdc_valid_to = CASE WHEN t._cdc_current THEN s._cdc_valid_to ELSE t._cdc_valid_to END,
  t._cdc_valid_to_ts = CASE WHEN t._cdc_current THEN s._cdc_valid_to_ts ELSE t._cdc_valid_to_ts END,
  t._cdc_current = t._cdc_current AND s._cdc_current
WHEN MATCHED AND s._cdc_valid_to IS NOT NULL AND t._cdc_current THEN UPDATE SET
  t._cdc_valid_to = s._cdc_valid_to,
  t._cdc_valid_to_ts = s._cdc_valid_to_ts,
  t._cdc_current = FALSE
WHEN NOT MATCHED AND NOT s._cdc_closes THEN INSERT ({{ columns }}) VALUES ({{ values }})
