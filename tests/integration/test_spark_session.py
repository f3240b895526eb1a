"""What a Databricks job does, on JVM Spark with Delta: engine mode `active` takes the
SparkSession the caller started (and leaves it running), and `target.catalog: spark_catalog`
with `target.schema` registers every silver table (and its history) in the session's catalog,
where spark-sql reads them by name. Delta Spark only (Sail has no catalog but its session's:
test_operate covers it)."""
import pytest

from cdc_sql import engine as engines
from tests.engines import kind, on_jvm
from tests.integration.helpers import assert_silver_equals, run

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
