-- What the first batch still MERGEs after writing the snapshot rows: the binlog changes, and
-- the snapshot rows the WHERE left out (at their watermark, they outrank their key's older
-- changes, as when every candidate went through one MERGE). The MERGE's offset guard lets a
-- written row's later changes win, and only those.
SELECT *
FROM {{ candidates }}
WHERE NOT (_cdc_op = 'r' AND NOT _cdc_remove)
