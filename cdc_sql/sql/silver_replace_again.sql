-- A re-snapshot's replacement once more, into a silver table with a change data feed that a
-- run killed before its state commit had replaced already (merge.replaced_already): merged,
-- not written over, so the feed shows only what changed since (a replacement deletes and
-- inserts every row). The rows are silver_replace.sql's; offsets only move forward, as in
-- silver_merge.sql, and a row the replacement no longer holds leaves silver.
MERGE INTO {{ silver }} AS t
USING (
{{ replacement }}
) AS s
ON {{ key_match }}
WHEN MATCHED AND s._cdc_offset > t._cdc_offset THEN UPDATE SET {{ assignments }}
WHEN NOT MATCHED THEN INSERT ({{ columns }}) VALUES ({{ values }})
WHEN NOT MATCHED BY SOURCE THEN DELETE
