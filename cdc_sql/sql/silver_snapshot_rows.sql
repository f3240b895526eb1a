-- The first batch writes the snapshot rows into silver as they are: each key has at most one
-- snapshot row (splits are disjoint key ranges), placed at its split's watermark. Rows the
-- projection's WHERE leaves out stay behind as candidates (silver_snapshot_rest.sql).
SELECT {{ output }}
FROM {{ candidates }}
WHERE _cdc_op = 'r' AND NOT _cdc_remove{{ group }}
