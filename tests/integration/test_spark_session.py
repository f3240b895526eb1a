"""What a Databricks job does, on JVM Spark with Delta: engine mode `active` takes the
SparkSession the caller started (and leaves it running), and `target.catalog: spark_catalog`
with `target.schema` registers every silver table (and its history) in the session's catalog,
where spark-sql reads them by name; with a Hive metastore in Derby (`engine.conf`), another
Spark process that knows only the metastore reads them by name too. Delta Spark only (Sail has
no catalog but its session's: test_operate covers it)."""
from pathlib import Path

import pytest

from cdc_sql import engine as engines
from tests.engines import kind, on_jvm
from tests.integration.helpers import assert_silver_equals, run

ROOT = str(Path(__file__).resolve().parents[2])
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not on_jvm(), reason="needs Delta Spark (a JVM engine)")]


@pytest.mark.skipif(kind() != "local", reason="a classic session in this process")
def test_active_takes_the_callers_session_and_leaves_it_running(mariadb, database, engine,
                                                                 make_pipeline):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO t VALUES (1, 'a'), (2, 'b')", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t\n"
                             f"- name: p\n  source: {database}.t\n"
                             f"  projection: SELECT id, v FROM t WHERE id > 1")
    assert engine.spark is not None  # the caller's session, running
    active = engines.start("active")
    assert active.spark is engine.spark and active.kind == "spark"
    run(pipeline, active)
    mariadb.execute("UPDATE t SET v = 'B' WHERE id = 2", "INSERT INTO t VALUES (3, 'c')",
                    db=database)
    run(pipeline, active)
    active.stop()  # the host's session: not stopped
    assert engine.spark.sql("SELECT 1").first()[0] == 1
    assert_silver_equals(engine, pipeline, "t", mariadb, f"SELECT * FROM {database}.t")
    assert_silver_equals(engine, pipeline, "p", mariadb, f"SELECT * FROM {database}.t WHERE id > 1")


def test_silver_registered_in_spark_catalog_is_read_by_name(mariadb, database, engine,
                                                            make_pipeline):
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO t VALUES (1, 'a'), (2, 'b')", db=database)
    schema = f"silver_{database}"
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t\n  history: true",
                             target={"catalog": "spark_catalog", "schema": schema})
    run(pipeline, engine)
    mariadb.execute("UPDATE t SET v = 'B' WHERE id = 2", "INSERT INTO t VALUES (3, 'c')",
                    db=database)
    run(pipeline, engine)
    spark = engine.spark
    assert [tuple(r) for r in spark.sql(f"SELECT id, v FROM {schema}.t ORDER BY id").collect()] \
        == [(1, "a"), (2, "B"), (3, "c")]
    assert spark.sql(f"SELECT count(*) FROM spark_catalog.{schema}.t_history "
                     f"WHERE id = 2").first()[0] == 2
    tables = {r.tableName for r in spark.sql(f"SHOW TABLES IN spark_catalog.{schema}").collect()
              if not r.isTemporary}
    assert tables == {"t", "t_history"}
    described = {r.col_name: r.data_type for r in
                 spark.sql(f"DESCRIBE TABLE EXTENDED {schema}.t").collect()}
    assert described["Provider"] == "delta"


# A spark-sql job elsewhere: a JVM Spark of its own that knows the metastore and Delta, and
# nothing of cdc-sql or the lake's paths.
READER = """
import json, sys
from pyspark.sql import SparkSession
from cdc_sql import jars
import pyspark
conf, queries = json.loads(sys.argv[1]), json.loads(sys.argv[2])
builder = SparkSession.builder.master("local[1]").config("spark.jars", ",".join(
    jars.delta_jars(pyspark.__version__))).config("spark.ui.enabled", "false")
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
print(json.dumps([[list(r) for r in spark.sql(q).collect()] for q in queries]))
spark.stop()
"""


def _metastore(tmp_path) -> dict:
    """A Hive metastore in Derby, in files: what a separate process finds again."""
    return {"spark.sql.catalogImplementation": "hive",
            "spark.hadoop.javax.jdo.option.ConnectionURL":
                f"jdbc:derby:;databaseName={tmp_path}/metastore_db;create=true",
            "spark.sql.warehouse.dir": str(tmp_path / "warehouse"),
            "spark.hadoop.hive.metastore.schema.verification": "false"}


def _in_tmp() -> dict:
    """The environment of a process run in a temporary directory (Derby writes derby.log where
    it runs) that imports this checkout's cdc_sql."""
    import os

    return {**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret",
            "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}


def _cli_run(pipeline) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "cdc_sql.cli", "run", pipeline.file,
                           "--until-caught-up"], capture_output=True, text=True, timeout=600,
                          cwd=Path(pipeline.file).parent, env=_in_tmp())
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.skipif(kind() != "local", reason="engine.conf sets a JVM cdc-sql starts (local)")
def test_silver_in_a_hive_metastore_is_read_by_name_from_another_process(
        mariadb, database, make_pipeline, tmp_path):
    import json
    import subprocess
    import sys

    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO t VALUES (1, 'a'), (2, 'b')", db=database)
    schema, metastore = f"silver_{database}", _metastore(tmp_path)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t\n  history: true",
                             target={"catalog": "spark_catalog", "schema": schema})
    conf = "".join(f"    {k}: '{v}'\n" for k, v in metastore.items())
    text = open(pipeline.file).read().replace("engine:\n", f"engine:\n  conf:\n{conf}", 1)
    open(pipeline.file, "w").write(text)
    _cli_run(pipeline)
    mariadb.execute("ALTER TABLE t ADD COLUMN w INT", "UPDATE t SET v = 'B', w = 7 WHERE id = 2",
                    "INSERT INTO t VALUES (3, 'c', 9)", db=database)
    _cli_run(pipeline)  # registered again (idempotent), silver and history gained `w`
    queries = [f"SELECT id, v, w FROM {schema}.t ORDER BY id",
               f"SELECT id, v, w FROM spark_catalog.{schema}.t_history WHERE id = 2 ORDER BY v",
               f"SHOW TABLES IN {schema}"]
    reader_conf = {**metastore, "spark.sql.extensions": engines.LOCAL_CONF["spark.sql.extensions"],
                   "spark.sql.catalog.spark_catalog":
                       engines.LOCAL_CONF["spark.sql.catalog.spark_catalog"]}
    done = subprocess.run([sys.executable, "-c", READER, json.dumps(reader_conf),
                           json.dumps(queries)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=_in_tmp())
    assert done.returncode == 0, done.stderr[-3000:]
    silver, history, tables = json.loads(done.stdout.strip().splitlines()[-1])
    assert silver == [[1, "a", None], [2, "B", 7], [3, "c", 9]]
    assert history == [[2, "B", 7], [2, "b", None]]
    assert sorted(t[1] for t in tables) == ["t", "t_history"]
