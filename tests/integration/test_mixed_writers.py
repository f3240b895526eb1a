"""Mixed writers: bronze, state and some silver versions are written by delta-rs in this
process, others by Delta Spark. Each reads, merges, time-travels, checkpoints and vacuums what
the other wrote, and silver keeps working after Delta Spark turns on deletion vectors or
column mapping (features delta-rs cannot write: cdc-sql then sends those tables' changes
through the engine, and says so; delta-rs 1.6 reads their log, not their rows: no deletion
vectors, and columns added under column mapping read as NULLs); a pipeline may ask for
deletion vectors itself. Delta Spark only: CDC_SQL_TEST_ENGINE=local or cluster."""
import json
import logging

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_sql.ops.maintain import maintain
from tests.engines import on_jvm
from tests.integration.helpers import assert_silver_equals, run, silver_path

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not on_jvm(), reason="needs Delta Spark (a JVM engine)")]


def rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in ("id", "v"))))


def spark_rows(engine, path: str, version: int | None = None) -> list[tuple]:
    return sorted((r.id, r.v) for r in engine.read(path, version).collect())


def test_delta_spark_reads_merges_time_travels_checkpoints_and_vacuums_what_delta_rs_wrote(
        engine, tmp_path):
    path = str(tmp_path / "by-delta-rs")
    write_deltalake(path, pa.table({"id": pa.array([1, 2, 3], pa.int32()),
                                    "v": ["a", "b", "c"]}))
    write_deltalake(path, pa.table({"id": pa.array([4], pa.int32()), "v": ["d"]}), mode="append")
    DeltaTable(path).create_checkpoint()  # Delta Spark starts from delta-rs's checkpoint
    spark = engine.spark
    spark.sql(f"MERGE INTO delta.`{path}` t USING (SELECT 2 AS id, 'B' AS v UNION ALL "
              f"SELECT 5, 'e') s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * "
              f"WHEN NOT MATCHED THEN INSERT *").collect()
    assert spark_rows(engine, path) == [(1, "a"), (2, "B"), (3, "c"), (4, "d"), (5, "e")]
    assert spark_rows(engine, path, 0) == [(1, "a"), (2, "b"), (3, "c")]
    assert spark.sql(f"SELECT count(*) FROM delta.`{path}` VERSION AS OF 1").first()[0] == 4
    spark.sql(f"OPTIMIZE delta.`{path}`").collect()
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS").collect()
    spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    assert rows(DeltaTable(path).to_pyarrow_table()) == spark_rows(engine, path)
    assert len(DeltaTable(path).file_uris()) == 1  # compacted, the old files vacuumed


def test_delta_rs_reads_merges_time_travels_checkpoints_and_vacuums_what_delta_spark_wrote(
        engine, tmp_path):
    path = str(tmp_path / "by-delta-spark")
    spark = engine.spark
    spark.sql(f"CREATE TABLE delta.`{path}` (id INT, v STRING) USING DELTA "
              f"TBLPROPERTIES ('delta.checkpointInterval' = '2')").collect()
    for n, v in enumerate("abc", 1):
        spark.sql(f"INSERT INTO delta.`{path}` VALUES ({n}, '{v}')").collect()
    table = DeltaTable(path)  # read from Delta Spark's checkpoint at version 2
    assert rows(table.to_pyarrow_table()) == [(1, "a"), (2, "b"), (3, "c")]
    table.merge(pa.table({"id": pa.array([2, 5], pa.int32()), "v": ["B", "e"]}),
                "t.id = s.id", source_alias="s", target_alias="t") \
        .when_matched_update_all().when_not_matched_insert_all().execute()
    assert rows(DeltaTable(path, version=1).to_pyarrow_table()) == [(1, "a")]
    assert spark_rows(engine, path, 2) == [(1, "a"), (2, "b")]  # Delta Spark reads it back
    table = DeltaTable(path)
    table.create_checkpoint()
    table.optimize.compact()
    table.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert spark_rows(engine, path) == [(1, "a"), (2, "B"), (3, "c"), (5, "e")]
    assert len(DeltaTable(path).file_uris()) == 1


@pytest.mark.parametrize("feature", ["deletion vectors", "column mapping"])
def test_silver_goes_on_after_delta_spark_turns_on_a_feature_delta_rs_cannot_write(
        mariadb, database, engine, make_pipeline, feature, caplog):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    run(pipeline, engine)  # silver created (and merged) by delta-rs, unless --sql-only
    silver = silver_path(pipeline, "t")
    properties = {"deletion vectors": "'delta.enableDeletionVectors' = 'true'",
                  "column mapping": "'delta.columnMapping.mode' = 'name'"}[feature]
    engine.spark.sql(f"ALTER TABLE delta.`{silver}` SET TBLPROPERTIES ({properties})").collect()
    mariadb.execute("UPDATE t SET v = 'B' WHERE id = 2", "DELETE FROM t WHERE id = 3",
                    "INSERT INTO t VALUES (4, 'd')", db=database)
    with caplog.at_level(logging.INFO, logger="cdc_sql"):
        run(pipeline, engine)  # the MERGE goes through the engine
    assert "which delta-rs cannot write" in caplog.text
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")
    mariadb.execute("ALTER TABLE t ADD COLUMN w INT", "INSERT INTO t VALUES (5, 'e', 6)",
                    "DELETE FROM t WHERE id = 1", db=database)
    run(pipeline, engine)  # a schema change and a MERGE on the engine
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")
    maintain(engine, pipeline, retention_hours=0)  # compaction and vacuum through the engine
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")
    assert DeltaTable(silver).schema().to_arrow().names[:3] == ["id", "v", "_cdc_offset"]


def test_a_pipeline_that_turns_deletion_vectors_on_gets_them_from_delta_spark(
        mariadb, database, engine, make_pipeline):
    """`delta.enableDeletionVectors` in table_properties: silver and history are created by
    Delta Spark with them (delta-rs writes none, and would turn on reader features of its own
    choosing), every window goes through its MERGE, which marks replaced rows in deletion
    vectors; silver stays the source's through changes and a compaction."""
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_200", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t\n  history: true\n"
                             f"  table_properties:\n    delta.enableDeletionVectors: 'true'")
    run(pipeline, engine)
    mariadb.execute("UPDATE t SET v = 'changed' WHERE id % 7 = 0", "DELETE FROM t WHERE id % 11 = 0",
                    "INSERT INTO t VALUES (201, 'new')", db=database)
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")
    silver = silver_path(pipeline, "t")
    for path in (silver, f"{silver}_history"):
        features = DeltaTable(path).protocol().reader_features
        assert "deletionVectors" in features and "variantType" not in features, path
    assert any(json.loads(line).get("add", {}).get("deletionVector")
               for version in range(DeltaTable(silver).version() + 1)
               for line in open(f"{silver}/_delta_log/{version:020}.json"))
    maintain(engine, pipeline, retention_hours=0)  # OPTIMIZE and VACUUM by Delta Spark
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")
