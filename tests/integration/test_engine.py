"""What the engine module papers over: Sail 0.7's time travel behind a checkpoint."""
import pyarrow as pa
import pytest
from deltalake import write_deltalake

pytestmark = pytest.mark.integration


def test_every_version_reads_back_though_checkpoints_follow_it(engine, tmp_path):
    """Sail writes a checkpoint every 10 commits and then fails `VERSION AS OF` most older
    versions; `Engine.read(path, version)` reads each version's rows and schema (a column added
    later is absent before it, NULL in the older files after it)."""
    path = str(tmp_path / "t")
    spark = engine.spark
    spark.sql("SELECT 1 AS id, 'a' AS v").write.format("delta").save(path)
    for i in range(2, 24):
        spark.sql(f"MERGE INTO delta.`{path}` t USING (SELECT {i} AS id, 'x' AS v) s "
                  "ON t.id = s.id WHEN NOT MATCHED THEN INSERT *").collect()
    write_deltalake(path, pa.table({"id": pa.array([], pa.int32()), "v": pa.array([], pa.string()),
                                    "w": pa.array([], pa.int64())}),
                    mode="append", schema_mode="merge")  # version 23: a column added
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 3").collect()  # version 24
    for version in range(23):
        rows = engine.read(path, version).collect()
        assert sorted(r.id for r in rows) == list(range(1, version + 2)), version
        assert rows[0].asDict().keys() == {"id", "v"}
    after = engine.read(path, 24)
    assert sorted(r.id for r in after.collect()) == [1, 2, *range(4, 24)]
    assert after.columns == ["id", "v", "w"] and after.where("w IS NOT NULL").count() == 0
    assert engine.read(path).count() == 22
