"""Differential: the corpus pipeline (tests/corpus, every type, charset and odd name; some
tables with history) gives the same silver and history, values and `_cdc_*` columns, on the
embedded Sail and on Spark + Delta (CDC_SQL_TEST_ENGINE=local or cluster). Two targets follow
one source: each step runs on both before the source changes again, so their watermarks and
offsets are the same."""
import pytest

from cdc_sql import engine as engines
from cdc_sql.config.model import load_pipeline
from cdc_sql.dev.mariadb import PASSWORD
from tests.corpus import data
from tests.engines import on_jvm
from tests.integration.helpers import history_path, run, silver_path
from tests.integration.test_corpus import corpus, tables  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not on_jvm(), reason="compares Sail with a JVM engine")]


@pytest.fixture(scope="module")
def sail():
    started = engines.start("sail")
    yield started
    started.stop()


def snapshot_free(rows: list[dict]) -> list[tuple]:
    """Rows, sorted, with the read time of snapshot rows left out: each target read the
    source at its own time (its watermarks are the same)."""
    out = []
    for row in rows:
        row = dict(row)
        if row.get("_cdc_op") == "r":
            row = {k: v for k, v in row.items() if not k.endswith("_ts")}
        out.append(tuple(sorted((k, repr(v)) for k, v in row.items())))
    return sorted(out)


def test_sail_and_spark_delta_give_the_same_silver_and_history(
        mariadb, corpus, engine, sail, make_pipeline, tmp_path):  # noqa: F811 - the fixture
    entries = tables(mariadb, corpus)
    yaml = "\n".join(f"- name: {name}\n  source: \"{source.replace(chr(34), chr(92) + chr(34))}\""
                     f"{extra}" + ("\n  history: true" if i % 4 == 0 else "")
                     for i, (name, source, extra) in enumerate(entries))
    on_spark = make_pipeline(yaml, binlog_batch_rows=7)
    text = (tmp_path / "pipeline.yaml").read_text().replace(str(tmp_path / "lake"),
                                                             str(tmp_path / "sail-lake"))
    (tmp_path / "sail.yaml").write_text(text)
    on_sail = load_pipeline(tmp_path / "sail.yaml", environ={
        "TEST_MYSQL_PASSWORD": PASSWORD})
    for pipeline, used in ((on_sail, sail), (on_spark, engine)):
        run(pipeline, used)
    with mariadb.connect(corpus) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        data.load(cur, 101)
        data.change(cur)
    for pipeline, used in ((on_sail, sail), (on_spark, engine)):
        run(pipeline, used)
    differing = []
    for table in on_spark.tables:
        paths = [(silver_path(on_sail, table.name), silver_path(on_spark, table.name))]
        if table.history:
            paths.append((history_path(on_sail, table.name), history_path(on_spark, table.name)))
        for sail_path, spark_path in paths:
            expected = snapshot_free(sail.read(sail_path).toArrow().to_pylist())
            found = snapshot_free(engine.read(spark_path).toArrow().to_pylist())
            if expected != found:
                differing.append(f"{spark_path.rsplit('/', 1)[-1]} ({table.source}): "
                                 f"{len(set(expected) ^ set(found))} rows differ")
    assert not differing, "\n".join(differing)
