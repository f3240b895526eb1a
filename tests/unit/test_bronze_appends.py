"""Bronze's change commits (lake/bronze.py): a large batch of the table's own columns is written
by pyarrow (lake/parquet_files.py), one that changes bronze's columns by delta-rs."""
from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable

from cdc_sql import engine as engines
from cdc_sql.lake import bronze
from cdc_sql.lake.lake import Lake
from cdc_sql.source.schema import Column, SourceTable

SOURCE = SourceTable("db", "t", (Column("id", "int", "int", 10, 0, None, None),
                                 Column("v", "varchar", "varchar(100)", None, None, None, 100)),
                     ("id",))


def changes(schema: pa.Schema, low: int, rows: int, **extra) -> pa.RecordBatch:
    values = {"id": pa.array(range(low, low + rows), pa.int32()),
              "v": pa.array(["x" * 90] * rows),
              "_cdc_offset": pa.array([f"000001:{i:012d}:000000" for i in range(low, low + rows)]),
              "_cdc_op": pa.array(["u"] * rows),
              "_cdc_ts": pa.array([0] * rows, pa.timestamp("us", tz="UTC")),
              **extra}
    return pa.record_batch([values.get(f.name, pa.nulls(rows, f.type)) for f in schema],
                           schema=schema)


def test_large_change_commits_are_written_here_and_new_columns_by_delta_rs(tmp_path):
    lake = Lake.open(engines.start("sail"), str(tmp_path))  # the engine is never started
    bronze.ensure_changes_table(lake, SOURCE)
    path = lake.changes_path("db", "t")
    schema = bronze.changes_schema(SOURCE)
    bronze.append_changes(lake, SOURCE, [changes(schema, 0, 10_000)])  # over 1 MB

    def timestamp_bounds() -> list:  # lake/parquet_files.py writes none of them
        actions = pa.RecordBatchReader.from_stream(
            DeltaTable(path).get_add_actions(flatten=True)).read_all()
        return actions["min._cdc_ts"].to_pylist()

    assert timestamp_bounds() == [None]  # written here
    wider = SourceTable("db", "t", (*SOURCE.columns,
                                    Column("n", "int", "int", 10, 0, None, None)), ("id",))
    schema = bronze.changes_schema(wider)
    bronze.append_changes(lake, wider, [changes(schema, 10_000, 10_000)])
    assert sum(bound is not None for bound in timestamp_bounds()) == 1  # delta-rs's file
    rows = DeltaTable(path).to_pyarrow_table()
    assert rows.num_rows == 20_000 and "n" in rows.column_names


def test_small_appends_are_packed_so_commits_stay_cheap(tmp_path, monkeypatch):
    """A run following the binlog appends a few changes to bronze every few seconds, and a
    table of many small files is slower to commit to and to read: after PACK_AFTER small
    appends a table's small files are packed (an OPTIMIZE commit), rows unchanged, and a file
    of PACKED_FILE_BYTES stays as it is."""
    from cdc_sql.lake import tables

    monkeypatch.setattr(tables, "PACK_AFTER", 10)
    lake = Lake.open(engines.start("sail"), str(tmp_path))  # the engine is never started
    bronze.ensure_changes_table(lake, SOURCE)
    path = lake.changes_path("db", "t")
    schema = bronze.changes_schema(SOURCE)
    bronze.append_changes(lake, SOURCE, [changes(schema, 0, 200_000)])  # one large file
    large = set(DeltaTable(path).file_uris())
    monkeypatch.setattr(tables, "PACKED_FILE_BYTES", 2 * 2**20)
    for low in range(200_000, 200_035):
        bronze.append_changes(lake, SOURCE, [changes(schema, low, 1)])
    table = DeltaTable(path)
    assert [c["operation"] for c in table.history()].count("OPTIMIZE") == 3
    assert large <= set(table.file_uris())  # past PACKED_FILE_BYTES: left alone
    assert len(table.file_uris()) == len(large) + 1 + 5  # three packs made one file, 5 since
    offsets = table.to_pyarrow_table(columns=["_cdc_offset"])["_cdc_offset"].to_pylist()
    assert sorted(offsets) == [f"000001:{i:012d}:000000" for i in range(200_035)]


def test_packing_is_due_after_PACK_AFTER_small_appends():
    from cdc_sql.lake.tables import PACK_AFTER, pack_due

    assert not pack_due(0) and not pack_due(PACK_AFTER - 1)
    assert pack_due(PACK_AFTER) and pack_due(PACK_AFTER + 1)


def test_small_local_appends_land_one_table_at_a_time():
    """Threads help only appends that wait on storage or encode Parquet (lake/tables.py)."""
    from cdc_sql.lake.tables import SMALL_APPEND, commit_workers

    assert commit_workers(True, [100, SMALL_APPEND - 1]) == 1
    assert commit_workers(True, []) == 1
    assert commit_workers(True, [100, SMALL_APPEND]) == 8
    assert commit_workers(False, [100, 200]) == 8


def test_bronze_and_state_keep_a_short_log(tmp_path):
    """Every commit lists the table's log (on a local disk or Azure, the whole of it), so the
    tables a run commits to every few seconds for days keep tables.LOG_TABLE's 10 seconds of it
    past the last checkpoint; delta-rs removes what expired at each checkpoint."""
    import os

    from cdc_sql.lake.state import CaptureEntry, State
    from cdc_sql.lake.tables import LOG_TABLE

    lake = Lake.open(engines.start("sail"), str(tmp_path))  # the engine is never started
    bronze.ensure_changes_table(lake, SOURCE)
    bronze.ensure_statements_table(lake)
    State(lake).write(CaptureEntry("binlog.000001:4"))
    for path in (lake.changes_path("db", "t"), lake.statements_path, lake.state_path):
        assert DeltaTable(path).metadata().configuration.items() >= LOG_TABLE.items(), path

    path = str(tmp_path / "expiring")  # what that setting does, at once
    lake.tables.create_arrow_table(path, pa.schema([("a", pa.int64())]),
                                   {"delta.logRetentionDuration": "interval 0 seconds"})
    for i in range(250):
        lake.tables.append_arrow(path, [pa.record_batch([pa.array([i])], names=["a"])],
                                 pa.schema([("a", pa.int64())]))
    assert len([f for f in os.listdir(f"{path}/_delta_log") if f.endswith(".json")]) <= 60
    assert sorted(DeltaTable(path).to_pyarrow_table()["a"].to_pylist()) == list(range(250))


def test_a_capture_append_looks_at_bronze_s_log_once(tmp_path, monkeypatch):
    """An append of a table's changes reads bronze's columns, then commits: one refresh of the
    open table for both (a schema per tenant makes thousands of them a batch). A commit of
    another writer since the table was opened is still seen (the append follows it). Of a
    bronze of a few commits, read from its log (lake/delta_log.py), no table is opened."""
    from cdc_sql.lake import delta_log
    from cdc_sql.lake.delta_rs_tables import DeltaRsTables
    from tests.unit.test_open_tables import tables_opened

    monkeypatch.setattr(delta_log, "MOST_COMMITS", 0)  # every table delta-rs's

    lake = Lake.open(engines.start("sail"), str(tmp_path))  # the engine is never started
    bronze.ensure_changes_table(lake, SOURCE)
    path, schema = lake.changes_path("db", "t"), bronze.changes_schema(SOURCE)
    bronze.append_changes(lake, SOURCE, [changes(schema, 0, 3)])  # the table now open here
    DeltaRsTables().append_arrow(path, [changes(schema, 3, 2)], schema)  # another writer
    refreshes = []
    real = DeltaTable.update_incremental
    monkeypatch.setattr(DeltaTable, "update_incremental",
                        lambda self: refreshes.append(1) or real(self))
    bronze.append_changes(lake, SOURCE, [changes(schema, 5, 4)])
    assert len(refreshes) == 1
    assert sorted(DeltaTable(path).to_pyarrow_table()["id"].to_pylist()) == list(range(9))
    monkeypatch.undo()
    DeltaRsTables().append_arrow(path, [changes(schema, 9, 1)], schema)  # another writer
    opened = tables_opened(monkeypatch)
    lake = Lake.open(engines.start("sail"), str(tmp_path))
    bronze.append_changes(lake, SOURCE, [changes(schema, 10, 2)])
    assert opened == []
    monkeypatch.undo()
    assert sorted(DeltaTable(path).to_pyarrow_table()["id"].to_pylist()) == list(range(12))


def test_a_pin_within_a_pin_is_the_outer_one(tmp_path):
    """`pinned` nests: an inner pin neither starts afresh nor ends the outer one (a table
    brought up to date in it stays so until the outer pin ends)."""
    from cdc_sql.lake.delta_rs_tables import DeltaRsTables

    tables = DeltaRsTables()
    with tables.pinned():
        outer = tables._local.refreshed
        with tables.pinned():
            assert tables._local.refreshed is outer
        assert tables._local.refreshed is outer
    assert tables._local.refreshed is None


def test_a_new_snapshot_table_is_made_once(tmp_path):
    """`ensure_snapshot_table` makes the table empty, and leaves it as it is when there."""
    lake = Lake.open(engines.start("sail"), str(tmp_path))  # the engine is never started
    bronze.ensure_snapshot_table(lake, SOURCE)
    bronze.ensure_snapshot_table(lake, SOURCE)
    assert DeltaTable(lake.snapshot_path("db", "t")).version() == 0
