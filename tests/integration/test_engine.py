"""What the engine and the lake paper over (Sail 0.7's time travel behind a checkpoint:
`lake.read_version`), and when a run starts the embedded engine."""
import glob
import json

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cdc_sql.engine import Engine
from cdc_sql.errors import CdcError
from cdc_sql.lake.lake import read_version
from tests import engines
from tests.integration.helpers import assert_silver_equals, run

pytestmark = pytest.mark.integration


def test_every_version_reads_back_though_checkpoints_follow_it(engine, tmp_path):
    """Sail writes a checkpoint every 10 commits and then fails `VERSION AS OF` most older
    versions; `read_version` reads each version's rows and schema (a column added
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
        rows = read_version(engine, path, version).collect()
        assert sorted(r.id for r in rows) == list(range(1, version + 2)), version
        assert rows[0].asDict().keys() == {"id", "v"}
    after = read_version(engine, path, 24)
    assert sorted(r.id for r in after.collect()) == [1, 2, *range(4, 24)]
    assert after.columns == ["id", "v", "w"] and after.where("w IS NOT NULL").count() == 0
    assert engine.read(path).count() == 22


def with_deletion_vectors(engine: Engine, path: str, deleted: int) -> None:
    """A table of ids 1-30 (version 0), its deletion vectors turned on (version 1), then ids
    1 to `deleted` deleted by the engine's MERGEs, one a version: each a deletion vector."""
    write_deltalake(path, pa.table({"id": pa.array(range(1, 31), pa.int32())}))
    DeltaTable(path).alter.set_table_properties({"delta.enableDeletionVectors": "true"})
    for i in range(1, deleted + 1):
        engine.spark.sql(f"MERGE INTO delta.`{path}` t USING (SELECT {i} AS id) s "
                         "ON t.id = s.id WHEN MATCHED THEN DELETE").collect()
    actions = [json.loads(line) for commit in glob.glob(f"{path}/_delta_log/*.json")
               for line in open(commit)]
    assert any(a.get("add", {}).get("deletionVector") for a in actions)


def test_rows_of_a_table_with_deletion_vectors_are_read_by_the_engine(engine, tmp_path):
    """delta-rs reads no deletion vectors: on a local lake (delta-rs with the engine beside
    it), the rows of such a table (silver's soft-deleted rows counted by `status`) are read
    by the engine, its log still by delta-rs."""
    from cdc_sql.lake.delta_rs_tables import DeltaRsTables
    from cdc_sql.lake.lake import WithFallback

    path = str(tmp_path / "t")
    with_deletion_vectors(engine, path, 3)
    tables = WithFallback(DeltaRsTables(), engine)
    assert sorted(tables.read_arrow(path, ["id"])["id"].to_pylist()) == list(range(4, 31))
    assert tables.version(path) == 4


def test_a_version_with_deletion_vectors_is_its_rows_or_refused(engine, tmp_path):
    """On a table whose deletion vectors are on (Delta Spark turns them on), a deleted row stays
    in its file: a version's files are not its rows, and `read_version` reads it with the
    engine's own time travel: that version's rows where the engine reads it, else one clear
    error naming the table (Sail 0.7 behind a checkpoint), never a deleted row."""
    path = str(tmp_path / "t")
    with_deletion_vectors(engine, path, 23)  # versions 2-24: row i deleted at version i + 1
    read = 0
    for version in range(25):
        try:
            rows = read_version(engine, path, version).collect()
        except CdcError as exc:
            assert f"{path}: Sail 0.7 cannot read version {version} of this table" in str(exc)
            continue
        assert sorted(r.id for r in rows) == list(range(max(version, 1), 31)), version
        read += 1
    assert read >= 3  # the version at each checkpoint and the last, on every engine


def lazy_engine(engine: Engine, booted: list) -> Engine:
    """The test's engine, not started yet, whose start is recorded (it is the shared one)."""
    return type(engine)(engine.mode, None, _boot=lambda: booted.append("booted") or engine.spark,
                        version=engine.version)


def test_runs_of_plain_tables_start_the_engine_only_when_a_window_needs_it(
        mariadb, database, engine, make_pipeline):
    """A plain table on a local path is snapshotted, captured and merged in this process: the
    engine is neither started in the background nor on first use (docs/engines.md), until a
    window needs its SQL (here: a DDL in it)."""
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO t VALUES (1, 'a'), (2, 'b')", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    booted: list = []
    run(pipeline, lazy_engine(engine, booted))
    mariadb.execute("UPDATE t SET v = 'c' WHERE id = 1", "DELETE FROM t WHERE id = 2",
                    "INSERT INTO t VALUES (3, 'd')", db=database)
    run(pipeline, lazy_engine(engine, booted))
    assert booted == []
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")
    mariadb.execute("ALTER TABLE t ADD COLUMN w INT", "INSERT INTO t VALUES (4, 'e', 5)",
                    db=database)
    run(pipeline, lazy_engine(engine, booted))  # a DDL in the window: the engine's SQL
    assert booted == ["booted"]
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")


def test_a_run_that_needs_the_engine_starts_it_while_the_source_is_read(
        mariadb, database, engine, make_pipeline):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO t VALUES (1, 'a')", db=database)
    pipeline = make_pipeline(f"- name: p\n  source: {database}.t\n"
                             f"  projection: SELECT id, v FROM t WHERE id > 0")
    booted: list = []
    lazy = lazy_engine(engine, booted)
    run(pipeline, lazy)
    assert booted == ["booted"]
    assert_silver_equals(engine, pipeline, "p", mariadb, f"SELECT * FROM {database}.t")
    again: list = []
    run(pipeline, lazy_engine(engine, again))  # nothing new to read: no engine started
    assert again == []
    mariadb.execute("UPDATE t SET v = 'b' WHERE id = 1", db=database)
    run(pipeline, lazy_engine(engine, again))
    assert again == ["booted"]
    assert_silver_equals(engine, pipeline, "p", mariadb, f"SELECT * FROM {database}.t")


def test_a_first_window_past_the_memory_budget_without_changes_starts_no_engine(
        mariadb, database, engine, make_pipeline, monkeypatch):
    """A big table's first run: silver is its first version, made of bronze's files, and
    no change came while it was read: nothing to MERGE, no engine (its next window, past the
    budget, goes to the engine)."""
    from cdc_sql.lake import small_merge

    monkeypatch.setattr(small_merge, "MEMORY_BUDGET", 1)  # every silver is past it
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO t VALUES (1, 'a'), (2, 'b')", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t")
    booted: list = []
    run(pipeline, lazy_engine(engine, booted))
    assert booted == []
    mariadb.execute("UPDATE t SET v = 'c' WHERE id = 1", db=database)
    run(pipeline, lazy_engine(engine, booted))
    assert booted == ["booted"]
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")


def test_sql_text_substitutes_no_variables(engine, monkeypatch):
    """`${env:...}` in SQL text stays text: a projection cannot read the job's environment."""
    monkeypatch.setenv("CDC_SQL_TEST_SECRET", "leaked")
    assert engine.spark.conf.get("spark.sql.variable.substitute") == "false"
    (row,) = engine.spark.sql("SELECT '${env:CDC_SQL_TEST_SECRET}' AS v").collect()
    assert row.v == "${env:CDC_SQL_TEST_SECRET}"


@pytest.mark.skipif(engines.kind() != "local", reason="the settings of the JVM cdc-sql starts")
def test_the_jvm_keeps_generated_code_compiled_and_collects_in_parallel(engine):
    """A window is a few small statements a table; with Spark's default cache of 100 compiled
    classes a few tables' windows compiled all their generated code again each time, and
    G1's barriers cost more than the parallel collector's (docs/performance.md, "JVM Spark's
    windows"): both are settings of the JVM's start, which a session cannot change later."""
    spark = engine.spark
    assert int(spark.conf.get("spark.sql.codegen.cache.maxEntries")) >= 4000
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory \
        .getGarbageCollectorMXBeans()
    assert {bean.getName() for bean in beans} == {"PS Scavenge", "PS MarkSweep"}
    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert "log4j2.configurationFile" in options  # errors only, to stderr, as before


@pytest.mark.skipif(engines.kind() != "sail", reason="a Spark Connect session in this process "
                    "turns pyspark's Connect mode on, which a JVM session's own calls refuse")
def test_a_stopped_engines_session_is_never_collected():
    """pyspark's SparkSession.__del__ closes the release threads every Spark Connect session
    shares; run by the garbage collector inside another session's gRPC call it hung a run
    (CI, 2026-11-26). A session this process made outlives its engine."""
    import gc
    import weakref

    from cdc_sql.engine import start

    started = start("sail")
    session = weakref.ref(started.spark)
    started.stop()
    del started
    gc.collect()
    assert session() is not None
