"""Catalog tables on JVM Spark: `target.catalog: spark_catalog` and `target.schema` register
every silver table (and its history) in the session's metastore, and spark-sql jobs read them by
name. Delta Spark only (Sail has no catalog but its session's: test_operate covers it)."""
import pytest

from tests.engines import on_jvm
from tests.integration.helpers import run

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not on_jvm(), reason="needs Delta Spark (a JVM engine)")]


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
    tables = {r.tableName for r in spark.sql(f"SHOW TABLES IN spark_catalog.{schema}").collect()}
    assert tables == {"t", "t_history"}
    described = {r.col_name: r.data_type for r in
                 spark.sql(f"DESCRIBE TABLE EXTENDED {schema}.t").collect()}
    assert described["Provider"] == "delta"
