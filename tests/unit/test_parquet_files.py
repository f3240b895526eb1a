"""lake/parquet_files.py: tables created from Parquet files written here, with exact statistics."""
from __future__ import annotations

import decimal
import functools
import json
import tempfile
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from hypothesis import given, settings, strategies as st

from cdc_sql.lake import parquet_files

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("d", pa.decimal128(12, 2)),
                    ("t", pa.timestamp("us")), ("ts", pa.timestamp("us", tz="UTC"))])
rows = st.tuples(st.integers(-2**63, 2**63 - 1), st.none() | st.text(max_size=8),
                 st.none() | st.decimals(-10**9, 10**9, places=2),
                 st.none() | st.integers(0, 2**50))


def batch(values: list[tuple]) -> pa.RecordBatch:
    ids, texts, decimals, times = zip(*values) if values else ([], [], [], [])
    return pa.record_batch([pa.array(ids, pa.int64()), pa.array(texts, pa.string()),
                            pa.array(decimals, pa.decimal128(12, 2)),
                            pa.array(times, pa.timestamp("us")),
                            pa.array(times, pa.timestamp("us", tz="UTC"))], schema=SCHEMA)


def file_stats(schema: pa.Schema, batches: list[pa.RecordBatch]) -> dict:
    """The statistics of the add action of the batches written as one file."""
    with tempfile.TemporaryDirectory() as path:
        [action] = parquet_files.write_files(path, schema, batches)
        return json.loads(action.stats, parse_float=decimal.Decimal)


@settings(deadline=None)
@given(st.lists(st.lists(rows, max_size=20), min_size=1, max_size=4))
def test_statistics_are_the_exact_bounds_and_null_counts(batches):
    """Bounds come from the file's footer, one row group per batch; unsigned and nested columns
    beside them (the footer's leaf columns are found past a nested one)."""
    nested = pa.list_(pa.struct([("k", pa.string()), ("n", pa.int64())]))  # two leaves
    schema = pa.schema([("tags", nested), *SCHEMA, ("u", pa.uint64())])

    def wider(values: list[tuple]) -> pa.RecordBatch:
        base = batch(values)
        tags = pa.array([[{"k": t, "n": i}] if t is not None else None
                         for i, t, _, _ in values], nested)
        unsigned = pa.array([i + 2**63 for i, *_ in values], pa.uint64())  # order kept
        return pa.record_batch([tags, *base.columns, unsigned], schema=schema)

    found = file_stats(schema, [wider(values) for values in batches])
    every = [row for values in batches for row in values]
    assert found["numRecords"] == len(every)
    for i, name in [(0, "id"), (1, "s"), (2, "d"), (0, "u")]:
        present = [row[i] + 2**63 if name == "u" else row[i] for row in every
                   if row[i] is not None]
        assert found["nullCount"][name] == len(every) - len(present)
        if present:
            order = (lambda t: t.encode()) if name == "s" else None  # UTF-8 byte order
            expected = (min(present, key=order), max(present, key=order))
            assert (found["minValues"][name], found["maxValues"][name]) == expected
        else:
            assert name not in found["minValues"]
    assert found["nullCount"]["tags"] == found["nullCount"]["s"]
    assert not {"t", "ts", "tags"} & (found["minValues"].keys() | found["maxValues"].keys())


@pytest.mark.parametrize("long", [65, 5000])  # past LONGEST; past the writer's own limit
def test_long_strings_leave_their_column_unbounded(long):
    found = file_stats(SCHEMA, [batch([(1, "b", None, None)]),
                                batch([(1, "a" * long, None, None), (2, "b", None, None)])])
    assert "s" not in found["minValues"] and "s" not in found["maxValues"]
    assert found["minValues"]["id"] == 1


def test_strings_up_to_the_longest_are_bounds_at_full_length():
    found = file_stats(SCHEMA, [batch([(1, "a" * 64, None, None), (2, "b" * 64, None, None)])])
    assert (found["minValues"]["s"], found["maxValues"]["s"]) == ("a" * 64, "b" * 64)


def test_a_column_of_nulls_in_one_row_group_keeps_the_others_bounds():
    found = file_stats(SCHEMA, [batch([(1, None, None, None)]), batch([(2, "b", None, None)])])
    assert (found["minValues"]["s"], found["maxValues"]["s"]) == ("b", "b")
    assert found["nullCount"] == {"id": 0, "s": 1, "d": 2, "t": 2, "ts": 2}
    assert "d" not in found["minValues"]


def test_a_table_created_from_streams_in_one_commit(tmp_path):
    path = str(tmp_path / "t")

    def stream(low: int):
        return (batch([(i, f"v{i}", decimal.Decimal(i) / 4, i) for i in range(j, j + 500)])
                for j in range(low, low + 3000, 500))

    parquet_files.TARGET_ROWS, before = 1000, parquet_files.TARGET_ROWS
    try:
        parquet_files.create_table(path, SCHEMA, [functools.partial(stream, 0),
                                                  functools.partial(stream, 3000)])
    finally:
        parquet_files.TARGET_ROWS = before
    table = DeltaTable(path)
    assert table.version() == 0 and "timestampNtz" in table.protocol().writer_features
    rows = table.to_pyarrow_table()
    assert sorted(rows["id"].to_pylist()) == list(range(6000))
    actions = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()
    assert actions.num_rows == 6  # files of about TARGET_ROWS rows, in the streams' order
    assert actions["min.id"].to_pylist() == list(range(0, 6000, 1000))
    assert table.to_pyarrow_table(filters=[("id", ">=", 5500)]).num_rows == 500
    assert pc.sum(actions["num_records"]).as_py() == 6000


def test_a_table_of_one_stream_or_none_is_created_in_one_commit(tmp_path):
    """One stream (a small table's read into bronze) is written by the calling thread; no
    stream makes an empty table."""
    import threading

    writers = []

    def stream():
        writers.append(threading.current_thread())
        yield batch([(1, "a", decimal.Decimal("0.25"), 7)])

    parquet_files.create_table(str(tmp_path / "one"), SCHEMA, [stream])
    parquet_files.create_table(str(tmp_path / "none"), SCHEMA, [])
    assert writers == [threading.current_thread()]
    one, none = DeltaTable(str(tmp_path / "one")), DeltaTable(str(tmp_path / "none"))
    assert (one.version(), one.to_pyarrow_table()["id"].to_pylist()) == (0, [1])
    assert (none.version(), none.to_pyarrow_table().num_rows) == (0, 0)


def test_rows_appended_to_a_local_table_are_files_written_here_in_one_commit_each(tmp_path):
    from cdc_sql.lake import delta_rs_tables as tables_module

    path, tables = str(tmp_path / "t"), tables_module.DeltaRsTables()
    tables.create_arrow_table(path, SCHEMA)

    def stream(low: int):
        return (batch([(i, f"v{i}", None, i)]) for i in range(low, low + 100))

    with ThreadPoolExecutor(2) as pool:  # side by side, each its own commit
        list(pool.map(lambda low: tables.append_arrow(path, stream(low), SCHEMA), (0, 100)))
    tables.append_arrow(path, iter(()), SCHEMA)  # nothing to add: no commit
    table = DeltaTable(path)
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == list(range(200))
    actions = pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()
    assert sorted(actions["min.id"].to_pylist()) == [0, 100]
    assert actions["min.ts"].null_count == 2  # this module's statistics: no temporal bounds

    tables.append_arrow(path, [batch([(500, "x", None, 1)])], SCHEMA)  # a small list (a
    actions = pa.RecordBatchReader.from_stream(  # state commit) to a table read from its
        DeltaTable(path).get_add_actions(flatten=True)).read_all()  # log: written here too
    assert actions.num_rows == 3 and actions["min.ts"].null_count == 3
    with pytest.MonkeyPatch.context() as patch:  # to a table delta-rs reads: its write
        patch.setattr(tables_module.delta_log, "MOST_COMMITS", 0)
        tables_module.DeltaRsTables().append_arrow(path, [batch([(501, "x", None, 1)])], SCHEMA)
    actions = pa.RecordBatchReader.from_stream(
        DeltaTable(path).get_add_actions(flatten=True)).read_all()
    assert actions.num_rows == 4 and actions["min.ts"].null_count == 3
    large = [batch([(i, "x" * 100, None, i) for i in range(1000, 1000 + 12_000)])]
    assert sum(b.nbytes for b in large) >= tables_module.tables.SMALL_APPEND
    tables.append_arrow(path, large, SCHEMA)  # a large list (binlog changes): written here
    actions = pa.RecordBatchReader.from_stream(
        DeltaTable(path).get_add_actions(flatten=True)).read_all()
    assert actions.num_rows == 5 and actions["min.ts"].null_count == 4
    tables.append_arrow(path, large, SCHEMA, schema_mode="merge")  # columns may change
    actions = pa.RecordBatchReader.from_stream(  # (bronze's schema follows the source's)
        DeltaTable(path).get_add_actions(flatten=True)).read_all()
    assert actions.num_rows == 6 and actions["min.ts"].null_count == 4
    assert DeltaTable(path).to_pyarrow_table().num_rows == 200 + 2 + 2 * 12_000
    wider = SCHEMA.append(pa.field("extra", pa.int32()))
    other = str(tmp_path / "wider")
    tables.create_arrow_table(other, wider)  # columns that differ: delta-rs's write decides
    tables.append_arrow(other, (b.append_column("extra", pa.array([1], pa.int32()))
                                for b in [batch([(7, "x", None, 1)])]), wider)
    with pytest.raises(Exception, match="[Ss]chema"):  # refused, as delta-rs always did
        tables.append_arrow(other, (b for b in [batch([(8, "y", None, 2)])]), SCHEMA)
    assert DeltaTable(other).to_pyarrow_table()["id"].to_pylist() == [7]


def test_row_groups_of_wide_rows_hold_at_most_row_group_bytes(tmp_path, monkeypatch):
    """A reader decodes a whole row group (lake/file_merge.py reads one at a time): rows of
    megabytes come a few to a group, narrow rows ROW_GROUP_ROWS to a group as before."""
    import pyarrow.parquet as pq

    monkeypatch.setattr(parquet_files, "ROW_GROUP_BYTES", 1000)
    wide = pa.record_batch([pa.array(range(10)), pa.array(["x" * 300] * 10)], ["id", "s"])
    assert parquet_files.row_group_rows(wide) == 3  # 3 x (300 + 4 + 8) bytes <= 1,000
    assert parquet_files.row_group_rows(wide.slice(0, 3)) == parquet_files.ROW_GROUP_ROWS
    [action] = parquet_files.write_files(str(tmp_path), wide.schema, [wide])
    footer = pq.read_metadata(tmp_path / action.path)
    assert [footer.row_group(i).num_rows for i in range(footer.num_row_groups)] == [3, 3, 3, 1]


@settings(deadline=None, max_examples=30)
@given(st.lists(rows, max_size=20))
def test_a_small_file_read_in_memory_is_the_file_as_pyarrow_reads_it(values):
    """`in_memory` (a small file read whole, decoded on the calling thread) reads what
    pyarrow reads from the file, every column and a choice of them."""
    import pyarrow.fs
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as path:
        [action] = parquet_files.write_files(path, SCHEMA, [batch(values)])
        files = parquet_files.table_files(path)
        whole = pq.read_table(f"{path}/{action.path}")
        assert parquet_files.in_memory(files, action.path).read(use_threads=False) == whole
        local = pyarrow.fs.LocalFileSystem()
        assert parquet_files.in_memory(local, f"{path}/{action.path}").read(
            columns=["s", "id"]) == whole.select(["s", "id"])


@settings(deadline=None, max_examples=60)
@given(st.lists(st.none() | st.text(alphabet="0123456789:ab.", max_size=6), max_size=30),
       st.text(alphabet="0123456789:ab.", max_size=6), st.text(alphabet="0123456789:ab.",
                                                               max_size=6),
       st.lists(st.none() | st.integers(-5, 5), max_size=30), st.integers(-6, 6),
       st.integers(-6, 6))
def test_rows_within_a_window_are_those_a_filter_expression_keeps(texts, after, upto, numbers,
                                                                 low, high):
    """delta_rs_tables._within_rows (comparisons computed) keeps the rows the filter
    expression `after < column <= upto` keeps, NULLs dropped, for strings and integers."""
    import pyarrow.parquet as pq

    from cdc_sql.lake.delta_rs_tables import _within_rows
    from cdc_sql.lake.tables import within_conditions

    for column, within in ((pa.table({"o": pa.array(texts, pa.string())}), ("o", after, upto)),
                           (pa.table({"o": pa.array(numbers, pa.int64())}), ("o", low, high))):
        expected = column.filter(pq.filters_to_expression(within_conditions(within)))
        assert _within_rows(column, within) == expected
