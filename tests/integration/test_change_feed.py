"""Delta's change data feed on silver (`change_data_feed`), and table layout (`table_properties`,
`cluster_by`), against MariaDB.

On Spark with Delta, every path that writes silver is read back with `readChangeFeed` and its
rows compared with what the source did: silver's first version made of bronze's files
and the in-process delta-rs MERGE (a plain table), the engine's MERGE (a projection, with
history), a foreign-key cascade, a TRUNCATE, a schema change and a re-snapshot's replacement;
a run killed between a MERGE's commit and the state commit replays the window without a second
change row. And replaying the whole feed rebuilds each table exactly. On Sail (the default
engine) the feed is refused before anything is written, and properties and clustering hold.
"""
import os
import re
import signal
from collections import Counter

import pytest
from deltalake import DeltaTable

from cdc_sql.config.model import load_pipeline
from cdc_sql.errors import ConfigError
from cdc_sql.lake import tables
from tests.engines import on_jvm
from tests.integration.helpers import (assert_silver_equals, history_path, run,
                                       run_crashing_at, runs_killed_at, silver_path)

pytestmark = pytest.mark.integration

CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")


def feed(engine, path: str, after: int) -> list[dict]:
    """The change feed's rows of the commits after version `after`, read by Delta Spark."""
    if DeltaTable(path).version() <= after:
        return []
    rows = engine.spark.read.format("delta").option("readChangeFeed", "true") \
        .option("startingVersion", after + 1).load(path).collect()
    return [r.asDict() for r in rows]


def changes(rows: list[dict], key: str = "id") -> Counter:
    return Counter((r[key], r["_change_type"]) for r in rows)


def updated(*ids) -> Counter:
    return Counter({(i, kind): 1 for i in ids for kind in ("update_preimage", "update_postimage")})


def of(kind: str, *ids) -> Counter:
    return Counter({(i, kind): 1 for i in ids})


def assert_feed_rebuilds(engine, path: str, key: tuple[str, ...]) -> None:
    """The whole feed, applied commit by commit from an empty table (a commit's deletes and
    pre-images before its inserts and post-images), gives the table as it is: no change row
    is missing, none is there twice."""
    rows = feed(engine, path, -1)
    table: dict = {}
    order = {"delete": 0, "update_preimage": 0, "insert": 1, "update_postimage": 1}
    for row in sorted(rows, key=lambda r: (r["_commit_version"], order[r["_change_type"]])):
        at = tuple(row[k] for k in key)
        image = {k: v for k, v in row.items() if k not in CHANGE_COLUMNS}
        if order[row["_change_type"]] == 0:
            assert table.pop(at) == image, (path, row)
        else:
            assert at not in table, (path, row)
            table[at] = image
    def shown(row: dict) -> str:
        return repr(sorted(row.items()))

    assert sorted(map(shown, table.values())) == \
        sorted(shown(r.asDict()) for r in engine.read(path).collect())


def versions(pipeline, *names: str) -> dict[str, int]:
    return {n: DeltaTable(silver_path(pipeline, n)).version() for n in names}


FEED_TABLES = """
- name: p
  source: {db}.p
- name: e
  source: {db}.e
  projection: SELECT id, v, n FROM e WHERE n >= 0
  history: true
- name: parent
  source: {db}.parent
- name: child
  source: {db}.child
"""


@pytest.mark.skipif(not on_jvm(), reason="Sail 0.7 cannot write a change data feed")
def test_every_write_path_records_what_the_source_did(mariadb, database, engine, make_pipeline):
    from tests.integration.test_resnapshot import cli

    mariadb.execute(
        "CREATE TABLE p (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
        "CREATE TABLE e (id INT PRIMARY KEY, v VARCHAR(20), n INT)",
        "CREATE TABLE parent (id INT PRIMARY KEY)",
        "CREATE TABLE child (id INT PRIMARY KEY, parent_id INT, CONSTRAINT fk FOREIGN KEY "
        "(parent_id) REFERENCES parent (id) ON DELETE CASCADE)",
        "INSERT INTO p SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_200",
        "INSERT INTO e SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_200",
        "INSERT INTO parent SELECT seq FROM seq_1_to_20",
        "INSERT INTO child SELECT seq, seq % 20 + 1 FROM seq_1_to_100", db=database)
    pipeline = make_pipeline(FEED_TABLES.format(db=database), chunk_size=50,
                             target={"change_data_feed": "true"})
    run(pipeline, engine)
    for name in ("p", "e", "parent", "child"):  # the first version: every row an insert
        path = silver_path(pipeline, name)
        assert DeltaTable(path).metadata().configuration["delta.enableChangeDataFeed"] == "true"
        inserted = feed(engine, path, -1)
        assert {r["_change_type"] for r in inserted} == {"insert"}
        assert len(inserted) == engine.read(path).count()
    start = versions(pipeline, "p", "e", "child")

    # updates, deletes, inserts, a row changed twice; a cascade; a kill after a MERGE commit
    for table in ("p", "e"):
        mariadb.execute(f"UPDATE {table} SET v = 'u' WHERE id <= 10",
                        f"UPDATE {table} SET v = 'uu' WHERE id = 1",
                        f"DELETE FROM {table} WHERE id BETWEEN 11 AND 15",
                        f"INSERT INTO {table} SELECT seq, 'new', seq FROM seq_1001_to_1005",
                        f"UPDATE {table} SET n = -1 WHERE id = 16", db=database)  # leaves e
    mariadb.execute("DELETE FROM parent WHERE id <= 2", db=database)
    outcomes = runs_killed_at(pipeline, ["silver.merged@2", "silver.merged@3"])
    assert all(code == -signal.SIGKILL for _, code in outcomes), outcomes
    run(pipeline, engine)
    new = range(1001, 1006)
    assert changes(feed(engine, silver_path(pipeline, "p"), start["p"])) == \
        updated(*range(1, 11), 16) + of("delete", *range(11, 16)) + of("insert", *new)
    assert changes(feed(engine, silver_path(pipeline, "e"), start["e"])) == \
        updated(*range(1, 11)) + of("delete", *range(11, 17)) + of("insert", *new)
    assert changes(feed(engine, silver_path(pipeline, "child"), start["child"])) == \
        of("delete", *[i for i in range(1, 101) if i % 20 + 1 <= 2])
    cut = versions(pipeline, "p")

    # a TRUNCATE, then keys inserted again in the same window
    mariadb.execute("TRUNCATE p", "INSERT INTO p VALUES (1, 'again', 1), (5000, 'x', 5)",
                    db=database)
    run(pipeline, engine)
    before = {i for i in [*range(1, 11), *range(16, 201), *new]}
    assert changes(feed(engine, silver_path(pipeline, "p"), cut["p"])) == \
        of("delete", *before) + of("insert", 1, 5000)
    cut = versions(pipeline, "p")

    # a schema change: the column's commit holds no row; the update after it does
    mariadb.execute("ALTER TABLE p ADD COLUMN w INT", "UPDATE p SET w = 7 WHERE id = 1",
                    db=database)
    run(pipeline, engine)
    rows = feed(engine, silver_path(pipeline, "p"), cut["p"])
    assert changes(rows) == updated(1) and \
        {r["_change_type"]: r["w"] for r in rows} == {"update_preimage": None,
                                                      "update_postimage": 7}
    cut = versions(pipeline, "p")

    # a re-snapshot: its replacement is every old row deleted, every row read inserted; killed
    # after the replacement commits, its replay merges the same rows: no change row again
    mariadb.execute("SET SESSION sql_log_bin = 0", "DELETE FROM p WHERE id = 5000",
                    "SET SESSION sql_log_bin = 1", db=database)
    cli("resnapshot", pipeline.file, "--tables", "p", wait=180)
    outcomes = runs_killed_at(pipeline, ["silver.merged"])
    assert outcomes[0][1] == -signal.SIGKILL, outcomes
    run(pipeline, engine)
    assert_silver_equals(engine, pipeline, "p", mariadb, f"SELECT * FROM {database}.p")
    assert changes(feed(engine, silver_path(pipeline, "p"), cut["p"])) == \
        of("delete", 1, 5000) + of("insert", 1)

    for name, key in (("p", ("id",)), ("e", ("id",)), ("parent", ("id",)), ("child", ("id",))):
        assert_feed_rebuilds(engine, silver_path(pipeline, name), key)
    assert_feed_rebuilds(engine, history_path(pipeline, "e"), ("id", "_cdc_valid_from"))


@pytest.mark.skipif(not on_jvm(), reason="Sail 0.7 cannot write a change data feed")
def test_a_widening_rewrites_silver_in_the_feed(mariadb, database, engine, make_pipeline):
    """A widened column (INT to BIGINT) rewrites silver in one commit: every row deleted with
    the old type and inserted with the new one, the feed still on. Delta Spark reads the
    feed up to the rewrite, or from it, but refuses one read across it (docs/operations.md)."""
    mariadb.execute("CREATE TABLE w (id INT PRIMARY KEY, n INT)",
                    "INSERT INTO w SELECT seq, seq FROM seq_1_to_50", db=database)
    pipeline = make_pipeline(f"- name: w\n  source: {database}.w\n  change_data_feed: true\n")
    run(pipeline, engine)
    cut = versions(pipeline, "w")
    mariadb.execute("ALTER TABLE w MODIFY n BIGINT", "UPDATE w SET n = 2 * n WHERE id = 1",
                    db=database)
    run(pipeline, engine)
    path = silver_path(pipeline, "w")
    assert DeltaTable(path).metadata().configuration["delta.enableChangeDataFeed"] == "true"
    assert changes(feed(engine, path, cut["w"])) == \
        of("delete", *range(1, 51)) + of("insert", *range(1, 51)) + updated(1)
    assert_silver_equals(engine, pipeline, "w", mariadb, f"SELECT * FROM {database}.w")
    with pytest.raises(Exception, match="DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA"):
        feed(engine, path, -1)  # one read across the rewrite: Delta refuses the two types


LAYOUT_TABLES = """
- name: p
  source: {db}.p
  cluster_by: [n]
- name: e
  source: {db}.e
  projection: SELECT id, n FROM e
  history: true
"""


def test_properties_and_clustering_on_every_path(mariadb, database, engine, make_pipeline,
                                                 tmp_path):
    """Table properties on silver and history (a plain table, a projection with history),
    given to tables that exist when the pipeline adds them later; silver clustered by
    `cluster_by` after its snapshot; on Sail, a change data feed refused before anything is
    written."""
    from tests.integration.test_resnapshot import cli

    mariadb.execute(*[sql for t in ("p", "e") for sql in (
        f"CREATE TABLE {t} (id INT PRIMARY KEY, n INT)",
        f"INSERT INTO {t} SELECT seq, (seq * 7919) % 1000 FROM seq_1_to_2000")], db=database)
    pipeline = make_pipeline(LAYOUT_TABLES.format(db=database), chunk_size=300,
                             target={"table_properties": "{delta.checkpointInterval: 5}"})
    run(pipeline, engine)
    paths = [silver_path(pipeline, "p"), silver_path(pipeline, "e"), history_path(pipeline, "e")]
    for path in paths:
        assert DeltaTable(path).metadata().configuration.get("delta.checkpointInterval") == "5"
    assert tables.clustered(_ranges(silver_path(pipeline, "p"), "n"))
    assert any(c["operation"] == "OPTIMIZE"  # its snapshot's files mixed n's values
               for c in DeltaTable(silver_path(pipeline, "p")).history())
    assert_silver_equals(engine, pipeline, "p", mariadb, f"SELECT * FROM {database}.p")

    text = open(pipeline.file).read().replace(
        "{delta.checkpointInterval: 5}", "{delta.checkpointInterval: 5, "
        "delta.logRetentionDuration: interval 45 days}")
    open(pipeline.file, "w").write(text)
    mariadb.execute("UPDATE p SET n = 1 WHERE id = 1", db=database)
    cli("run", pipeline.file, "--until-caught-up", wait=300)
    for path in paths:
        configuration = DeltaTable(path).metadata().configuration
        assert configuration.get("delta.logRetentionDuration") == "interval 45 days", path
    assert_silver_equals(engine, pipeline, "p", mariadb, f"SELECT * FROM {database}.p")

    if not on_jvm():  # Sail: the feed is refused, naming the key, before anything is written
        feed_file = tmp_path / "feed.yaml"
        feed_file.write_text(text.replace("tables:", "  change_data_feed: true\ntables:", 1)
                             .replace(str(pipeline.root), str(tmp_path / "feed-lake")))
        process = cli("run", str(feed_file), "--until-caught-up")
        out, err = process.communicate(timeout=120)
        lines = err.decode().strip().splitlines()
        assert process.returncode != 0 and len(lines) == 1, lines
        assert "target.change_data_feed" in lines[0] and "Sail 0.7 cannot" in lines[0]
        assert not (tmp_path / "feed-lake").exists()


LIQUID_TABLE = """
- name: l
  source: {db}.l
  cluster_by: [n]
  history: true
"""


@pytest.mark.skipif(not on_jvm(), reason="Sail has no liquid clustering: cluster_by is "
                                         "cdc-sql's Z-order there (the test above)")
def test_cluster_by_is_liquid_clustering_on_spark_with_delta(mariadb, database, engine,
                                                             make_pipeline, monkeypatch):
    """Silver and history liquid-clustered by `cluster_by` (DESCRIBE DETAIL's
    clusteringColumns), their files clustered by OPTIMIZE after the snapshot (a run crashed
    after its first MERGE, before the clustering, replayed), equal to the source after
    changes made while the snapshot was read; new columns clustered again in full at the next
    run, no columns CLUSTER BY NONE, every window merged by the engine; `maintain` then
    OPTIMIZEs without ZORDER BY (which Delta refuses on a table with the clustering feature).
    A column Delta keeps no statistics of (a DECIMAL wider than 18 digits) is refused in one
    line before the ALTER TABLE."""
    import threading

    from cdc_sql.ops.maintain import maintain

    mariadb.execute("CREATE TABLE l (id INT PRIMARY KEY, n INT, m INT, d DECIMAL(20,2))",
                    "INSERT INTO l SELECT seq, (seq * 7919) % 1000, seq % 7, seq * 1.25 "
                    "FROM seq_1_to_2000",
                    db=database)
    pipeline = make_pipeline(LIQUID_TABLE.format(db=database), chunk_size=500)
    paths = [silver_path(pipeline, "l"), history_path(pipeline, "l")]
    select = f"SELECT id, n, m, d FROM {database}.l"

    def clustering(path):
        return engine.spark.sql(f"DESCRIBE DETAIL {tables.table_ref(path)}").first()[
            "clusteringColumns"]

    def optimized(path):  # the parameters of the table's last OPTIMIZE
        return next(c["operationParameters"] for c in DeltaTable(path).history()
                    if c["operation"] == "OPTIMIZE")

    def write():  # while the snapshot is read
        with mariadb.connect(database) as conn, conn.cursor() as cur:
            for i in range(1, 201):
                cur.execute("UPDATE l SET n = n + 1, m = %s WHERE id = %s", (i, i * 9))
                cur.execute("INSERT INTO l (id, n, m) VALUES (%s, %s, 0)", (5000 + i, i))
                cur.execute("DELETE FROM l WHERE id = %s", (i * 9 + 1,))

    writer = threading.Thread(target=write)
    writer.start()
    run_crashing_at(pipeline, engine, monkeypatch, "silver.merged")  # after the first MERGE
    writer.join()
    assert clustering(paths[0]) == []  # created by the engine, not clustered yet
    run(pipeline, engine)
    for path in paths:
        assert clustering(path) == ["n"], path
        assert "clustering" in DeltaTable(path).protocol().writer_features
        assert optimized(path)["clusterBy"] == '["n"]', path
    assert_silver_equals(engine, pipeline, "l", mariadb, select)

    def run_with(cluster_by: str) -> None:
        text = open(pipeline.file).read()
        open(pipeline.file, "w").write(re.sub(r"cluster_by: \[.*\]", cluster_by, text))
        mariadb.execute("UPDATE l SET n = -n, m = m + 1 WHERE id % 3 = 0",
                        "DELETE FROM l WHERE id % 13 = 0", db=database)
        run(load_pipeline(pipeline.file, environ={**os.environ,
                                                  "TEST_MYSQL_PASSWORD": "cdc-secret"}), engine)
        assert_silver_equals(engine, pipeline, "l", mariadb, select)

    run_with("cluster_by: [m, n]")  # new columns: every file clustered again
    for path in paths:
        assert clustering(path) == ["m", "n"], path
        assert {"isFull": True, "clusterBy": '["m","n"]'}.items() <= optimized(path).items()
    run_with("cluster_by: []")  # CLUSTER BY NONE: the files stay, OPTIMIZE compacts
    assert [clustering(path) for path in paths] == [[], []]
    maintain(engine, pipeline, retention_hours=0)
    assert DeltaTable(paths[0]).history(1)[0]["operation"] == "VACUUM END"
    assert_silver_equals(engine, pipeline, "l", mariadb, select)
    with pytest.raises(ConfigError, match=r"table `l`, cluster_by\[0\] `d`: a DECIMAL\(20,2\): "
                       r"wider than 18 digits.*Delta liquid-clusters only by columns with "
                       r"statistics: cluster by others"):
        run_with("cluster_by: [d]")
    assert [clustering(path) for path in paths] == [[], []]


def _ranges(path: str, column: str):
    from cdc_sql.lake.delta_rs_tables import DeltaRsTables

    return DeltaRsTables().key_ranges(path, column)


def test_the_plan_prints_the_layout(mariadb, database, make_pipeline):
    from tests.integration.test_resnapshot import cli

    mariadb.execute("CREATE TABLE p (id INT PRIMARY KEY, n INT)", db=database)
    pipeline = make_pipeline(LAYOUT_TABLES.format(db=database).split("- name: e")[0],
                             target={"table_properties": "{delta.checkpointInterval: 5}"})
    out = cli("plan", pipeline.file, "--engine", "sail", wait=120)
    assert "-- layout: change data feed off; table properties: delta.checkpointInterval=5; " \
           "files clustered by n (cdc-sql's Z-order" in out
    assert "liquid" not in out
    out = cli("plan", pipeline.file, "--engine", "local", wait=120)  # no JVM: plan starts none
    assert "files liquid-clustered by n (Delta's CLUSTER BY; OPTIMIZE after a snapshot" in out
    assert "-- windows: every one through the engine's SQL below: liquid-clustered by n " \
           "(Delta's clustering table feature, which delta-rs cannot write)" in out
