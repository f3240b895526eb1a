"""Tables kept open by `DeltaRsTables` (lake/delta_rs_tables.py): on a local path an open
table at its latest version is used as it is (its log is not listed again), and whatever
another writer did since (a commit, the table removed and made again) is always seen; the
same of a table read from its log's files (lake/delta_log.py), which no DeltaTable opens.
`delta_rs_reads` makes every table delta-rs's, as a log too long to be read here does."""
from __future__ import annotations

import os
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction
import pytest
from hypothesis import given, settings, strategies as st

from cdc_sql.lake import delta_log
from cdc_sql.lake.delta_rs_tables import DeltaRsTables


@pytest.fixture
def delta_rs_reads(monkeypatch):
    monkeypatch.setattr(delta_log, "MOST_COMMITS", 0)


@pytest.fixture(scope="module", params=["log", "delta-rs"])
def read_by(request):
    """Each test of it twice: tables read from their logs here, and by delta-rs."""
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "delta-rs":
            patch.setattr(delta_log, "MOST_COMMITS", 0)
        yield request.param


def rows(*values: int) -> pa.Table:
    return pa.table({"a": pa.array(values, pa.int64())})


def add_file(tables: DeltaRsTables, path: str, name: str, values: pa.Table) -> None:
    """A file written here and committed by `replace_files`."""
    pq.write_table(values, f"{path}/{name}")
    tables.replace_files(path, [], [AddAction(name, os.path.getsize(f"{path}/{name}"), {}, 0,
                                              True, None)], values.schema)


def tables_opened(monkeypatch) -> list:
    """Each DeltaTable opened."""
    calls: list = []
    real = DeltaTable.__init__
    monkeypatch.setattr(DeltaTable, "__init__",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    return calls


def listed(monkeypatch) -> list:
    """Each time delta-rs lists an open table's log to bring it up to date."""
    calls: list = []
    real = DeltaTable.update_incremental
    monkeypatch.setattr(DeltaTable, "update_incremental",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    return calls


def test_an_open_table_at_its_latest_is_not_listed_again(tmp_path, monkeypatch, delta_rs_reads):
    path = str(tmp_path / "t")
    write_deltalake(path, rows(1))
    tables = DeltaRsTables()
    tables.append_arrow(path, [rows(2).to_batches()[0]], rows().schema)  # opened, then its commit
    calls = listed(monkeypatch)
    assert tables.version(path) == 1 and tables.schema(path).names == ["a"]
    assert sorted(tables.read_arrow(path)["a"].to_pylist()) == [1, 2]
    assert calls == []


def test_another_writer_s_commit_is_seen(tmp_path, monkeypatch, delta_rs_reads):
    path = str(tmp_path / "t")
    write_deltalake(path, rows(1))
    tables = DeltaRsTables()
    assert tables.version(path) == 0
    write_deltalake(path, rows(2), mode="append")  # another writer
    calls = listed(monkeypatch)
    assert tables.version(path) == 1 and calls == []  # counted from the log's file names
    assert sorted(tables.read_arrow(path)["a"].to_pylist()) == [1, 2] and len(calls) == 1


def test_a_table_removed_and_made_again_is_seen(tmp_path):
    """delta-rs's own listing looks only for versions after the open one: a table made again
    up to the same version would pass for the old one."""
    path = str(tmp_path / "t")
    write_deltalake(path, rows(1))
    write_deltalake(path, rows(2), mode="append")
    tables = DeltaRsTables()
    assert sorted(tables.read_arrow(path)["a"].to_pylist()) == [1, 2]
    assert sorted(low for _, low, _ in tables.data_files(path, "a")) == [1, 2]
    shutil.rmtree(path)
    write_deltalake(path, rows(7))
    write_deltalake(path, rows(8), mode="append")
    assert sorted(tables.read_arrow(path)["a"].to_pylist()) == [7, 8]
    assert sorted(low for _, low, _ in tables.data_files(path, "a")) == [7, 8]  # not kept


OPERATIONS = st.lists(st.tuples(st.sampled_from(["own", "files", "other", "remade", "read"]),
                                st.integers(0, 2)), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None)
@given(OPERATIONS)
def test_what_an_open_table_reads_is_the_table_s_latest(tmp_path_factory, read_by, operations):
    """Any mix of commits through the open table (appends, files written here), commits by
    another writer and the table removed and made again with a few versions: each version
    asked and each read is the table's latest."""
    path = str(tmp_path_factory.mktemp("open") / "t")
    write_deltalake(path, rows(0))
    tables, value = DeltaRsTables(), 0
    for operation, count in operations:
        value += 1
        if operation == "own":
            tables.append_arrow(path, [rows(value).to_batches()[0]], rows().schema)
        elif operation == "files":
            add_file(tables, path, f"f{value}.parquet", rows(value))
        elif operation == "other":
            write_deltalake(path, rows(value), mode="append")
        elif operation == "remade":
            shutil.rmtree(path)
            write_deltalake(path, rows(value))
            for more in range(count):
                write_deltalake(path, rows(value * 10 + more), mode="append")
        truth = DeltaTable(path)
        values = truth.to_pyarrow_table()["a"].to_pylist()
        assert tables.version(path) == truth.version()
        assert sorted(tables.read_arrow(path)["a"].to_pylist()) == sorted(values)
        assert len(tables.data_files(path, "a")) == len(truth.file_uris())  # add actions kept
        # for their version only
        assert sorted(tables.read_within(path, ["a"], ("a", 1, value - 1))["a"].to_pylist()) \
            == sorted(v for v in values if 1 < v <= value - 1)


def test_a_version_is_counted_from_commit_files_after_a_commit_delta_rs_does_not_follow(
        tmp_path, monkeypatch, delta_rs_reads):
    """A commit of files written here (`replace_files`, delta-rs's `create_write_transaction`)
    leaves the open table where it was: the version after it is counted from the log's file
    names, not by bringing the table up to date."""
    path = str(tmp_path / "t")
    write_deltalake(path, rows(1))
    tables = DeltaRsTables()
    assert tables.version(path) == 0
    add_file(tables, path, "added.parquet", rows(2))
    write_deltalake(path, rows(3), mode="append")  # and another writer's
    calls = listed(monkeypatch)
    assert tables.version(path) == 2 and calls == []
    assert sorted(tables.read_arrow(path)["a"].to_pylist()) == [1, 2, 3]


@settings(max_examples=25, deadline=None)
@given(OPERATIONS)
def test_within_pinned_each_read_sees_this_thread_s_own_commits(tmp_path_factory, read_by,
                                                                operations):
    """`pinned` brings a table up to date once, at its first use; the commits made through
    the open tables after that (appends, files written here: delta-rs's
    `create_write_transaction` leaves its table where it was) are seen by every later read."""
    path = str(tmp_path_factory.mktemp("pinned") / "t")
    write_deltalake(path, rows(0))
    tables, value = DeltaRsTables(), 0
    with tables.pinned():
        for operation, _ in operations:
            value += 1
            if operation in ("own", "other"):
                tables.append_arrow(path, [rows(value).to_batches()[0]], rows().schema)
            elif operation in ("files", "remade"):
                add_file(tables, path, f"f{value}.parquet", rows(value))
            truth = DeltaTable(path)
            assert tables.version(path) == truth.version()
            assert sorted(tables.read_arrow(path)["a"].to_pylist()) == \
                sorted(truth.to_pyarrow_table()["a"].to_pylist())


def test_a_table_made_here_is_opened_once_at_its_first_use(tmp_path, monkeypatch, delta_rs_reads):
    """A first run makes a changes table for each table of the pipeline and writes few of
    them: the table `create_arrow_table` makes is not opened then (opening it cost as much as
    making it), but at its first use, once."""
    path = str(tmp_path / "t")
    tables = DeltaRsTables()
    tables.create_arrow_table(path, rows().schema)
    tables.create_arrow_table(path, rows().schema)  # there: left as it is
    opened = tables_opened(monkeypatch)
    calls = listed(monkeypatch)
    assert tables.version(path) == 0 and tables.schema(path) == rows().schema
    tables.append_arrow(path, [rows(4).to_batches()[0]], rows().schema)
    assert tables.read_arrow(path)["a"].to_pylist() == [4]
    assert opened == [1] and calls == []


def test_the_files_of_a_table_made_here_with_its_rows_are_known_without_opening_it(
        tmp_path, monkeypatch, delta_rs_reads):
    """A first run creates each small table's bronze with its rows and then reads its files
    (lake/first_version.py): while the table is at that first version, they are the files
    it was made with; after another commit, or made again by another writer, it is opened."""
    path = str(tmp_path / "t")
    tables = DeltaRsTables()
    tables.create_from_streams(path, rows().schema, [lambda: rows(1, 2).to_batches()])
    opened = tables_opened(monkeypatch)
    made = tables.plain_files(path)
    assert opened == [] and made == [os.path.basename(f) for f in
                                     DeltaTable(path).file_uris()]
    write_deltalake(path, rows(3), mode="append")  # another writer's commit
    opened.clear()
    assert len(tables.plain_files(path)) == 2 and opened == [1]
    shutil.rmtree(path)
    write_deltalake(path, rows(7))  # made again: version 0 again, other files
    assert tables.plain_files(path) == [os.path.basename(f) for f in
                                        DeltaTable(path).file_uris()] != made


def test_a_table_made_with_a_timestamp_without_time_zone_declares_the_feature(tmp_path):
    """Readers (Sail, Spark) require the timestampNtz feature of a table with such a column."""
    import datetime

    path = str(tmp_path / "t")
    schema = pa.schema([("at", pa.timestamp("us"))])
    tables = DeltaRsTables()
    tables.create_arrow_table(path, schema)
    assert "timestampNtz" in (DeltaTable(path).protocol().writer_features or [])
    at = datetime.datetime(2026, 11, 26, 12, 0, 1, 5)
    tables.append_arrow(path, [pa.record_batch([pa.array([at], pa.timestamp("us"))],
                                               schema=schema)], schema)
    assert tables.read_arrow(path)["at"].to_pylist() == [at]


WINDOWS = st.lists(st.lists(st.one_of(st.none(), st.integers(0, 30)), max_size=6), max_size=5)


@settings(max_examples=40, deadline=None)
@given(WINDOWS, st.integers(-1, 31), st.integers(-1, 31), st.booleans(), st.booleans())
def test_a_window_read_from_the_files_is_delta_rs_s_read(tmp_path_factory, appends, after,
                                                         upto, added, streamed):
    """`read_within` (a window read straight from the files that may hold it) gives the rows
    delta-rs's read with the same conditions gives: offsets as text, NULLs, files skipped by
    their statistics, files read whole or (`streamed`, as larger ones are) a batch at a time;
    a column added after some files were written (`added`: those files lack it) is read as
    delta-rs reads it."""
    from unittest import mock

    from cdc_sql.lake import delta_rs_tables

    path = str(tmp_path_factory.mktemp("window") / "t")
    schema = pa.schema([("o", pa.string()), ("n", pa.int64())])
    write_deltalake(path, schema.empty_table())
    for number, offsets in enumerate(appends):
        texts = [None if o is None else f"{o:03d}" for o in offsets]
        write_deltalake(path, pa.table({"o": pa.array(texts, pa.string()),
                                        "n": pa.array([number] * len(texts), pa.int64())}),
                        mode="append")
    columns = ["o", "n"]
    if added:
        write_deltalake(path, pa.table({"o": ["010"], "n": [99], "m": ["new"]}), mode="append",
                        schema_mode="merge")
        columns.append("m")
    bounds = (f"{after:03d}", f"{upto:03d}")
    truth = DeltaTable(path).to_pyarrow_table(
        columns=columns, filters=[("o", ">", bounds[0]), ("o", "<=", bounds[1])])
    with mock.patch.object(delta_rs_tables, "WHOLE_FILE_BYTES", -1 if streamed else 2**30):
        read = DeltaRsTables().read_within(path, columns, ("o", *bounds))
    assert read.schema == truth.schema
    assert sorted(read.to_pylist(), key=str) == sorted(truth.to_pylist(), key=str)
