"""Operating a pipeline: maintenance, silver tables changed by hand, tables registered by name."""
import glob

import pytest
from chispa import assert_df_equality

from cdc_sql.errors import StateError
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.tables import LOG_TABLE
from cdc_sql.ops.maintain import maintain
from cdc_sql.ops.verify import compare_table
from tests.integration.helpers import run, silver_path, state_log

pytestmark = pytest.mark.integration


@pytest.fixture
def orders(mariadb, database):
    mariadb.execute("CREATE TABLE o (id INT PRIMARY KEY, amount INT, note VARCHAR(20))",
                    db=database)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO o VALUES (%s, %s, 'n')", [(i, i) for i in range(1, 3001)])
    return database


def _files(place) -> set[str]:
    """The Parquet files under a place of the lake (a local directory or an object store)."""
    if place.local:
        return set(glob.glob(f"{place}/**/*.parquet", recursive=True))
    import obstore

    from cdc_sql.lake import objects

    return {o["path"] for chunk in obstore.list(objects.store(place)) for o in chunk
            if o["path"].endswith(".parquet")}


def _silver(engine, pipeline):
    return engine.read(silver_path(pipeline, "o")).orderBy("id")


def test_maintain_prunes_and_compacts_without_changing_silver(
        orders, mariadb, make_pipeline, engine):
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.o")
    run(pipeline, engine)
    for round_ in range(4):  # many small bronze and silver commits
        mariadb.execute(f"UPDATE o SET amount = amount + 1 WHERE id % 7 = {round_}",
                        f"DELETE FROM o WHERE id = {100 + round_}", db=orders)
        run(pipeline, engine)
    root = pipeline.root
    before = _silver(engine, pipeline).toPandas()
    bronze_files = _files(root / "bronze")
    entries = len(state_log(root))
    lake = Lake.open(engine, str(root))
    changes = f"{root}/bronze/_changes/{orders}.o"  # as a target made before LOG_TABLE had it
    lake.tables.set_properties(changes, {"delta.logRetentionDuration": "interval 30 days"})

    report = maintain(engine, pipeline, retention_hours=0)

    assert_df_equality(_silver(engine, pipeline),
                       engine.spark.createDataFrame(before, _silver(engine, pipeline).schema),
                       ignore_nullable=True)
    assert report["pruned"][f"{root}/bronze/_changes/{orders}.o"] > 0
    assert report["pruned"][f"{root}/bronze/_snapshot/{orders}.o"] == 3000
    assert engine.read(f"{root}/bronze/_changes/{orders}.o").count() == 0  # all applied
    assert engine.read(f"{root}/bronze/_snapshot/{orders}.o").count() == 0
    left = _files(root / "bronze")
    assert bronze_files - left and len(left) < len(bronze_files)  # pruned files left the disk
    assert len(state_log(root)) < entries
    assert report["skipped"] == []
    assert lake.tables.properties(changes).items() >= LOG_TABLE.items()
    # the pipeline goes on as before, and silver still equals the source
    mariadb.execute("UPDATE o SET note = 'after' WHERE id <= 10", db=orders)
    run(pipeline, engine)
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""


def test_a_run_maintains_the_target_once_maintain_every_hours_have_passed(
        orders, mariadb, make_pipeline, engine):
    """A run following the binlog holds the lease `cdc-sql maintain` needs, so a run
    maintains the target itself, between two passes, once target.maintain_every_hours have
    passed since the last maintenance (on a target never maintained: since its first run)."""
    import datetime as dt

    from cdc_sql.lake.state import MaintainEntry, State
    from tests.integration.helpers import checkpoint

    pipeline = make_pipeline(f"- name: o\n  source: {orders}.o",
                             target={"maintain_every_hours": 1, "retention_hours": 0})
    run(pipeline, engine)
    counted_from = checkpoint(engine, pipeline).maintained
    assert counted_from is not None and not counted_from.done  # the clock starts
    root = pipeline.root
    assert engine.read(f"{root}/bronze/_snapshot/{orders}.o").count() == 3000
    run(pipeline, engine)  # within the hour: no maintenance
    assert checkpoint(engine, pipeline).maintained == counted_from
    assert engine.read(f"{root}/bronze/_snapshot/{orders}.o").count() == 3000

    two_hours_ago = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2)
    State(Lake.open(engine, str(root))).write(
        MaintainEntry(at=two_hours_ago.isoformat(), done=False))  # as if counted from then
    mariadb.execute("UPDATE o SET note = 'later' WHERE id <= 10", db=orders)
    run(pipeline, engine)  # maintains first: the snapshot's bronze rows are pruned
    maintained = checkpoint(engine, pipeline).maintained
    assert maintained.done and maintained.at > two_hours_ago.isoformat()
    assert engine.read(f"{root}/bronze/_snapshot/{orders}.o").count() == 0
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""
    run(pipeline, engine)  # not due again
    assert checkpoint(engine, pipeline).maintained == maintained


def test_a_silver_table_changed_by_hand_is_reported_not_merged_over(
        orders, mariadb, make_pipeline, engine):
    from deltalake import DeltaTable

    pipeline = make_pipeline(f"- name: o\n  source: {orders}.o")
    run(pipeline, engine)
    maintain(engine, pipeline, retention_hours=1000)  # compaction alone is not a change
    path = silver_path(pipeline, "o")
    ours = DeltaTable(path).version()
    engine.spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 5").collect()
    mariadb.execute("UPDATE o SET amount = 0 WHERE id = 6", db=orders)
    with pytest.raises(StateError) as caught:
        run(pipeline, engine)
    message = str(caught.value)
    assert "silver table o" in message and f"after its version {ours}" in message
    assert "DELETE" in message and f"TO VERSION AS OF {ours}" in message
    assert DeltaTable(path).version() == ours + 1  # nothing merged over the change
    DeltaTable(path).restore(ours)
    run(pipeline, engine)
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""


def test_silver_tables_are_registered_by_name(orders, make_pipeline, engine):
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.o",
                             target={"schema": f"silver_{orders}"})
    run(pipeline, engine)
    assert engine.spark.sql(f"SELECT COUNT(*) FROM silver_{orders}.o").collect()[0][0] == 3000


def test_maintain_keeps_bronze_inside_the_retention(orders, mariadb, make_pipeline, engine):
    pipeline = make_pipeline(f"- name: o\n  source: {orders}.o")
    run(pipeline, engine)
    mariadb.execute("UPDATE o SET amount = -amount WHERE id <= 50", db=orders)
    run(pipeline, engine)
    report = maintain(engine, pipeline)  # target.retention_hours: 168 by default
    assert set(report["pruned"].values()) == {0}
    assert engine.read(f"{pipeline.root}/bronze/_changes/{orders}.o").count() == 50
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""


def _key_ranges(path):
    import pyarrow as pa
    from deltalake import DeltaTable

    adds = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pydict()
    return sorted(zip(adds["min.id"], adds["max.id"]))


def _last_merge_metrics(path):
    from deltalake import DeltaTable

    (commit,) = DeltaTable(path).history(1)
    assert commit["operation"] == "MERGE"
    return commit["operationMetrics"]


def test_silver_files_hold_key_ranges_so_a_merge_rewrites_only_its_files(
        mariadb, database, make_pipeline, engine, monkeypatch):
    from cdc_sql.lake import delta_rs_tables, tables

    monkeypatch.setattr(tables, "TARGET_FILE_BYTES", 96 * 1024)
    mariadb.execute("CREATE TABLE big (id INT PRIMARY KEY, v VARCHAR(40))",
                    "INSERT INTO big SELECT seq, MD5(seq) FROM seq_1_to_60000", db=database)
    pipeline = make_pipeline(f"- name: big\n  source: {database}.big\n  history: true",
                             chunk_size=5000)
    run(pipeline, engine)
    path = silver_path(pipeline, "big")
    files = _key_ranges(path)
    assert len(files) >= 4
    assert all(high < low for (_, high), (low, _) in zip(files, files[1:]))  # disjoint ranges
    mariadb.execute("UPDATE big SET v = 'changed' WHERE id BETWEEN 100 AND 400", db=database)
    run(pipeline, engine)
    metrics = _last_merge_metrics(path)
    assert metrics["numTargetFilesRemoved"] == 1 and metrics["numTargetRowsUpdated"] == 301
    compacted = []  # (path, compact): silver and history are clustered, not bin-packed after
    compact_and_vacuum = delta_rs_tables.DeltaRsTables.compact_and_vacuum

    def recorded(self, table, hours, compact=True):
        compacted.append((table, compact))
        return compact_and_vacuum(self, table, hours, compact)

    monkeypatch.setattr(delta_rs_tables.DeltaRsTables, "compact_and_vacuum", recorded)
    assert maintain(engine, pipeline, retention_hours=1000)["skipped"] == []
    assert {p: c for p, c in compacted if "/silver/" in p} == {path: False,
                                                                f"{path}_history": False}
    assert any(c for p, c in compacted if "/bronze/" in p)
    files = _key_ranges(path)
    assert all(high < low for (_, high), (low, _) in zip(files, files[1:]))
    assert compare_table(engine, pipeline, pipeline.tables[0]) == ""
