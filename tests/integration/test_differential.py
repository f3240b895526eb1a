"""Differential: the corpus pipeline (tests/corpus, every type, charset and odd name; some
tables with history) gives the same silver and history, values and `_cdc_*` columns, on the
embedded Sail and on Spark + Delta (CDC_SQL_TEST_ENGINE=local or cluster). Two targets follow
one source: each step runs on both before the source changes again, so their watermarks and
offsets are the same. Sail runs as `cdc-sql run --engine sail` in a process of its own (a
Spark Connect session and a classic one do not share a process: pyspark's functions build the
columns of one kind). Sail's lake is read back by delta-rs, Spark's by Spark (a table with
a column named `odd col` gets column mapping there, which delta-rs 1.6 reads as NULLs), their
timestamps compared in UTC."""
import datetime as dt
import os
import subprocess
import sys

import pytest
from deltalake import DeltaTable

from cdc_sql.dev.mariadb import PASSWORD
from tests.corpus import data
from tests.engines import on_jvm
from tests.integration.helpers import history_path, run, silver_path
from tests.integration.test_corpus import corpus, tables  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not on_jvm(), reason="compares Sail with a JVM engine")]


def snapshot_free(rows: list[dict]) -> list[tuple]:
    """Rows, sorted, with the read time of snapshot rows left out: each target read the
    source at its own time (at the same watermarks)."""
    out = []
    for row in rows:
        if row.get("_cdc_op") == "r":
            row = {k: v for k, v in row.items() if not k.endswith("_ts")}
        out.append(tuple(sorted((k, _value(v)) for k, v in row.items())))
    return sorted(out)


def _value(value) -> str:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).isoformat()
    return repr(value)


def on_sail(file) -> None:
    subprocess.run([sys.executable, "-m", "cdc_sql.cli", "run", str(file), "--until-caught-up",
                    "--engine", "sail"], check=True, capture_output=True,
                   env={**os.environ, "TEST_MYSQL_PASSWORD": PASSWORD})


def test_sail_and_spark_delta_give_the_same_silver_and_history(
        mariadb, corpus, engine, make_pipeline, tmp_path):  # noqa: F811 - the fixture
    entries = tables(mariadb, corpus)
    yaml = "\n".join(f"- name: {name}\n  source: \"{source.replace(chr(34), chr(92) + chr(34))}\""
                     f"{extra}" + ("\n  history: true" if i % 4 == 0 else "")
                     for i, (name, source, extra) in enumerate(entries))
    on_spark = make_pipeline(yaml, binlog_batch_rows=7)
    sail_file = tmp_path / "sail.yaml"
    sail_file.write_text((tmp_path / "pipeline.yaml").read_text().replace(
        f"path: {tmp_path / 'lake'}", f"path: {tmp_path / 'sail-lake'}"))
    sail_lake = tmp_path / "sail-lake"
    on_sail(sail_file)
    run(on_spark, engine)
    with mariadb.connect(corpus) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        data.load(cur, 101)
        data.change(cur)
    on_sail(sail_file)
    run(on_spark, engine)
    differing = []
    for table in on_spark.tables:
        paths = [silver_path(on_spark, table.name)]
        if table.history:
            paths.append(history_path(on_spark, table.name))
        for spark_path in paths:
            sail_path = spark_path.replace(str(tmp_path / "lake"), str(sail_lake))
            expected = snapshot_free(DeltaTable(sail_path).to_pyarrow_table().to_pylist())
            found = snapshot_free(engine.read(spark_path).toArrow().to_pylist())
            if expected != found:
                differing.append(f"{spark_path.rsplit('/', 1)[-1]} ({table.source}): "
                                 f"{len(set(expected) ^ set(found))} rows differ")
    assert len(differing) == 0, "\n".join(differing)
