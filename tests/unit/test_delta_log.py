"""A local table of a few commits read from its log's files and committed to here
(lake/delta_log.py, through DeltaRsTables): what it reads is what delta-rs reads, what it
commits delta-rs reads back, no DeltaTable is opened for it, and any table it does not know
how to read is delta-rs's."""
from __future__ import annotations

import datetime
import decimal
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction

from cdc_sql.lake import delta_log
from cdc_sql.lake.delta_rs_tables import DeltaRsTables
from cdc_sql.lake.tables import OWN_MERGE, TableLayout
from tests.unit.test_open_tables import tables_opened


SCHEMA = pa.schema([("a", pa.int64()), ("s", pa.string())])


def rows(*values: int) -> pa.Table:
    return pa.table({"a": list(values), "s": [f"v{v}" for v in values]}, SCHEMA)


def a_file(path: str, name: str, values: pa.Table) -> AddAction:
    pq.write_table(values, f"{path}/{name}")
    stats = json.dumps({"numRecords": values.num_rows,
                        "minValues": {"a": min(values["a"].to_pylist())},
                        "maxValues": {"a": max(values["a"].to_pylist())}})
    return AddAction(name, os.path.getsize(f"{path}/{name}"), {}, 0, True, stats)


def test_a_small_table_is_read_and_committed_without_delta_rs_opening_it(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    write_deltalake(path, rows(1, 2))
    write_deltalake(path, rows(3), mode="append")
    truth = DeltaTable(path)
    tables, calls = DeltaRsTables(), tables_opened(monkeypatch)
    assert tables.version(path) == 1 and tables.schema(path) == rows().schema
    assert tables.table_id(path) == str(truth.metadata().id)
    assert tables.unwritable(path) == []
    assert tables.properties(path) == dict(truth.metadata().configuration)
    assert tables.layout(path) == TableLayout(dict(truth.metadata().configuration), [], [])
    assert sorted(tables.read_within(path, ["a"], ("a", 1, 3))["a"].to_pylist()) == [2, 3]
    assert sorted(low for _, low, _ in tables.data_files(path, "a")) == [1, 3]
    assert tables.file_rows(path) == 3
    first = tables.plain_files(path)[0]
    tables.replace_files(path, [first], [a_file(path, "new.parquet", rows(7))],
                         rows().schema)
    tables.append_arrow(path, rows(9).to_batches(), rows().schema)
    assert calls == []  # not one table opened
    assert tables.version(path) == 3
    assert tables.history(path, 1) == [(2, OWN_MERGE, ""), (3, "WRITE", "")]
    monkeypatch.undo()
    after = DeltaTable(path)
    assert after.version() == 3
    assert sorted(after.to_pyarrow_table()["a"].to_pylist()) == [3, 7, 9]
    assert sorted((c["version"], c["operation"], c.get("userMetadata"))
                  for c in after.history(2)) == [(2, "WRITE", OWN_MERGE), (3, "WRITE", None)]


def test_within_a_pin_a_log_is_looked_at_once_until_a_change_made_here(tmp_path, monkeypatch):
    """`pinned`: a table's log is looked at at its first read, and again only after a change
    through these tables (every writing method), which the next read sees; outside a pin,
    at every read."""
    path = str(tmp_path / "t")
    write_deltalake(path, rows(1, 2))
    tables, looks = DeltaRsTables(), []
    read = delta_log.read
    monkeypatch.setattr(delta_log, "read", lambda *a: looks.append(a[0]) or read(*a))
    with tables.pinned():
        assert tables.schema(path) == SCHEMA and tables.file_rows(path) == 2
        assert tables.version(path) == 0 and len(looks) == 1
        tables.append_arrow(path, rows(3).to_batches(), SCHEMA)
        looks.clear()
        assert tables.file_rows(path) == 3 and tables.version(path) == 1 and len(looks) == 1
        tables.delete_rows(path, [("a", "=", 3)])  # by delta-rs
        assert tables.file_rows(path) == 2 and tables.version(path) == 2
        with tables.pinned():  # within another: that one
            assert tables.file_rows(path) == 2
        write_deltalake(path, rows(4), mode="append")  # not through these tables: not seen
        assert tables.version(path) == 2
    looks.clear()
    assert tables.version(path) == 3 and tables.file_rows(path) == 3 and len(looks) == 2


def test_the_history_read_here_is_delta_rs_s(tmp_path, monkeypatch):
    """Every kind of commit of delta-rs, and this module's own, named alike."""
    path = str(tmp_path / "t")
    write_deltalake(path, rows(1, 2, 3))
    write_deltalake(path, rows(4), mode="append")
    table = DeltaTable(path)
    table.delete("a = 2")
    table.merge(rows(3, 5), "t.a = s.a", source_alias="s", target_alias="t") \
        .when_matched_update_all().when_not_matched_insert_all().execute()
    table.optimize.compact()
    table.alter.set_table_properties({"delta.checkpointInterval": "50"})
    write_deltalake(path, rows(6), mode="overwrite")
    DeltaRsTables().replace_files(path, [], [a_file(path, "x.parquet", rows(8))],
                                  rows().schema)
    here = DeltaRsTables().history(path, -1)
    monkeypatch.setattr(delta_log, "MOST_COMMITS", 0)
    assert here == DeltaRsTables().history(path, -1) and len(here) == 8
    assert here[-1][1] == OWN_MERGE


def test_a_commit_to_a_version_another_writer_took_is_not_made(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, rows(1))
    snapshot = delta_log.read(path)
    write_deltalake(path, rows(2), mode="append")  # takes version 1
    assert not delta_log.commit(snapshot, [a_file(path, "x.parquet", rows(3))], [], None)
    assert sorted(DeltaTable(path).to_pyarrow_table()["a"].to_pylist()) == [1, 2]
    assert [n for n in os.listdir(f"{path}/_delta_log") if n.startswith(".")] == []
    assert not delta_log.commit(delta_log.read(path), [], ["not-there.parquet"], None)
    # through DeltaRsTables: delta-rs's commit then
    tables = DeltaRsTables()
    tables.version(path)
    write_deltalake(path, rows(4), mode="append")
    tables.replace_files(path, [], [a_file(path, "y.parquet", rows(5))], rows().schema)
    assert sorted(DeltaTable(path).to_pyarrow_table()["a"].to_pylist()) == [1, 2, 4, 5]


def test_a_commit_here_at_the_checkpoint_interval_writes_a_checkpoint(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, rows(1), configuration={"delta.checkpointInterval": "3"})
    tables = DeltaRsTables()
    for value in (2, 3, 4):
        tables.replace_files(path, [], [a_file(path, f"f{value}.parquet", rows(value))],
                             rows().schema)
    assert any("checkpoint" in n for n in os.listdir(f"{path}/_delta_log"))
    assert delta_log.read(path) is None  # from now on, delta-rs's
    assert sorted(DeltaRsTables().read_arrow(path)["a"].to_pylist()) == [1, 2, 3, 4]


@pytest.mark.parametrize("kind", ["partitioned", "column mapping", "many commits",
                                  "gap", "unknown file", "truncated", "not there",
                                  "file outside"])
def test_a_table_not_read_here_is_delta_rs_s(tmp_path, kind):
    path = str(tmp_path / "t")
    if kind == "partitioned":
        write_deltalake(path, rows(1, 2), partition_by=["s"])
    elif kind == "column mapping":
        from deltalake import DeltaTable as Table, Field, Schema

        Table.create(path, Schema([Field("a", "long")]),
                     configuration={"delta.columnMapping.mode": "name"})
    elif kind == "not there":
        pass
    else:
        write_deltalake(path, rows(1))
        for value in range(delta_log.MOST_COMMITS if kind == "many commits" else 2):
            write_deltalake(path, rows(value), mode="append")
        log = f"{path}/_delta_log"
        if kind == "gap":
            os.remove(delta_log.commit_file(path, 1))
        elif kind == "unknown file":
            open(f"{log}/_last_checkpoint", "w").write("{}")
        elif kind == "file outside":
            with open(delta_log.commit_file(path, 3), "w") as commit:
                commit.write(json.dumps({"add": {"path": "/elsewhere/x.parquet", "size": 1,
                                                 "partitionValues": {}, "dataChange": True,
                                                 "modificationTime": 0}}) + "\n")
        elif kind == "truncated":
            text = open(delta_log.commit_file(path, 2)).read()
            open(delta_log.commit_file(path, 2), "w").write(text[:len(text) // 2])
    assert delta_log.read(path) is None


def test_a_snapshot_follows_commits_and_sees_a_table_made_again(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, rows(1))
    first = delta_log.read(path)
    assert delta_log.read(path, first) is first  # nothing new: the same
    write_deltalake(path, rows(2), mode="append")
    second = delta_log.read(path, first)
    assert second.version == 1 and len(second.files) == 2
    import shutil

    shutil.rmtree(path)
    write_deltalake(path, rows(5))
    write_deltalake(path, rows(6), mode="append")
    again = delta_log.read(path, second)
    assert again.version == 1 and set(again.files).isdisjoint(second.files)


def test_bounds_of_types_json_holds_inexactly_are_delta_rs_s(tmp_path):
    """Integer and string bounds are read here as delta-rs gives them; of other types (a
    decimal, a time) the file list is delta-rs's."""
    path = str(tmp_path / "t")
    table = pa.table({"i": pa.array([1, 5], pa.int32()), "s": ["a", "b"],
                      "d": pa.array([decimal.Decimal("1.50"), decimal.Decimal("2.25")],
                                    pa.decimal128(10, 2)),
                      "t": pa.array([datetime.datetime(2024, 1, 1)] * 2, pa.timestamp("us",
                                                                                      "UTC"))})
    write_deltalake(path, table)
    snapshot = delta_log.read(path)
    assert [f[3:] for f in snapshot.file_list("i")] == [(1, 5)]
    assert [f[3:] for f in snapshot.file_list("s")] == [("a", "b")]
    assert snapshot.file_list("d") is None and snapshot.file_list("t") is None
    assert snapshot.file_list("missing") is None
    assert DeltaRsTables().data_files(path, "d")[0][1:] == (decimal.Decimal("1.50"),
                                                           decimal.Decimal("2.25"))


@pytest.mark.parametrize("configuration, protocol, writable", [
    ({}, {"minReaderVersion": 1, "minWriterVersion": 2}, True),
    ({}, {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["timestampNtz"],
          "writerFeatures": ["timestampNtz", "appendOnly", "invariants"]}, True),
    ({"delta.appendOnly": "true"}, {"minReaderVersion": 1, "minWriterVersion": 2}, False),
    ({"delta.constraints.positive": "a > 0"},
     {"minReaderVersion": 1, "minWriterVersion": 3}, False),
    ({}, {"minReaderVersion": 1, "minWriterVersion": 4}, False),
    ({}, {"minReaderVersion": 3, "minWriterVersion": 7,
          "writerFeatures": ["checkConstraints"]}, False),
])
def test_only_a_table_with_nothing_for_a_writer_to_check_is_committed_to_here(
        configuration, protocol, writable):
    metadata = {"id": "x", "configuration": configuration, "partitionColumns": [],
                "schemaString": json.dumps({"type": "struct", "fields": []})}
    snapshot = delta_log.Snapshot("p", 0, protocol, metadata, {}, ())
    assert snapshot.writable() is writable
    invariant = dict(metadata, schemaString='{"fields": [{"metadata": {"delta.invariants": 1}}]}')
    assert not delta_log.Snapshot("p", 0, protocol, invariant, {}, ()).writable()


def test_a_writer_s_temporary_file_or_a_checksum_beside_the_commits_is_no_stranger(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, rows(1))
    for name in ("_commit_5e1f.json.tmp", ".cdc-sql-x.json.tmp", f"{0:020d}.crc"):
        open(f"{path}/_delta_log/{name}", "w").write("{}")
    assert delta_log.read(path).version == 0
