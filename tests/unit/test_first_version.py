"""lake/first_version.py: silver's first version made of bronze's snapshot files, only when
they hold exactly the window's rows, and then the rows silver gets from bronze's rows."""
from __future__ import annotations

import datetime as dt
import decimal
import json
import os

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from hypothesis import assume, given, strategies as st

from cdc_sql import engine as engines
from cdc_sql.lake import bronze, first_version, parquet_splice, small_merge
from cdc_sql.lake.first_version import BronzeFile
from cdc_sql.lake.lake import Lake
from cdc_sql.source.schema import Column, SourceTable
from cdc_sql.window import SplitRef, Window
from tests.unit.test_parquet_splice import bits

# reads of consecutive splits: (splits, watermark, files its rows went into)
reads = st.lists(st.tuples(st.integers(1, 4), st.sampled_from(["w1", "w2", "w3"]),
                           st.integers(1, 3)), min_size=1, max_size=5)


def window_and_files(groups) -> tuple[list[SplitRef], list[BronzeFile]]:
    """State's splits of a window and bronze's files: each read's rows in files of
    consecutive splits (a file may hold one split, or several)."""
    splits, files, next_id = [], [], 0
    for n, (size, watermark, parts) in enumerate(groups):
        ids = list(range(next_id, next_id + size))
        splits += [SplitRef(i, f"a{n}", watermark) for i in ids]
        cuts = sorted({0, size, *range(1, size)[:parts - 1]})
        files += [BronzeFile(f"f{n}-{low}", f"a{n}", ids[low], ids[high - 1])
                  for low, high in zip(cuts, cuts[1:])]
        next_id += size
    return splits, files


@given(reads)
def test_files_of_the_window_attempts_are_taken_each_at_its_splits_watermark(groups):
    splits, files = window_and_files(groups)
    found = first_version.chosen(list(reversed(files)), splits)
    assert sorted(found) == sorted((f.name, groups[int(f.attempt[1:])][1]) for f in files)


@given(reads, st.data())
def test_files_that_do_not_hold_exactly_the_window_mean_silver_is_written_from_rows(groups,
                                                                                    data):
    splits, files = window_and_files(groups)
    how = data.draw(st.sampled_from(["attempt", "another attempt", "bounds", "split",
                                     "state attempt", "watermarks"]))
    at = data.draw(st.integers(0, len(files) - 1))
    file = files[at]
    if how == "attempt":  # rows of several attempts in one file
        files[at] = BronzeFile(file.name, None, file.first, file.last)
    elif how == "another attempt":  # a killed read's rows state never recorded
        files.append(BronzeFile("old", "killed", file.first, file.last))
    elif how == "bounds":  # a footer without statistics
        files[at] = BronzeFile(file.name, file.attempt, None, file.last)
    elif how == "split":  # a split state records of another attempt, or not at all
        files[at] = BronzeFile(file.name, file.attempt, file.first, file.last + 1)
        splits = [s for s in splits if s.split_id != file.last + 1]
    elif how == "state attempt":  # state written before attempts were recorded
        splits[0] = SplitRef(splits[0].split_id, None, splits[0].watermark)
    else:  # one file, its splits at two watermarks
        assume(len(splits) > 1)
        files[at] = BronzeFile(file.name, file.attempt, splits[0].split_id,
                               splits[-1].split_id)
        if len({s.watermark for s in splits}) == 1:
            splits[-1] = SplitRef(splits[-1].split_id, splits[-1].attempt, "w9")
        splits = [SplitRef(s.split_id, file.attempt, s.watermark) for s in splits]
    assert first_version.chosen(files, splits) is None


def test_no_splits_means_nothing_to_take():
    assert first_version.chosen([], []) is None


SOURCE = SourceTable("db", "t", (
    Column("id", "bigint", "bigint", 19, 0, None, None),
    Column("v", "varchar", "varchar(40)", None, None, None, 40),
    Column("d", "decimal", "decimal(12,2)", 12, 2, None, None),
    Column("f", "float", "float", None, None, None, None),
    Column("x", "double", "double", None, None, None, None),
    Column("at", "datetime", "datetime(6)", None, None, 6, None)), ("id",))
READ_AT = dt.datetime(2026, 11, 27, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)


def source_rows(low: int, rows: int, split: int) -> pa.RecordBatch:
    schema = SOURCE.arrow_schema
    ids = range(low, low + rows)
    values = {"id": list(ids), "v": [None if i % 5 == 0 else f"v{i}" for i in ids],
              "d": [None if i % 7 == 0 else decimal.Decimal(i) / 100 for i in ids],
              "f": [float("nan") if i % 11 == 0 else i / 3 for i in ids],
              "x": [-0.0 if i % 13 == 0 else i / 7 for i in ids],
              "at": [dt.datetime(2026, 1, 1) + dt.timedelta(microseconds=i) for i in ids]}
    return pa.record_batch([*(pa.array(values[f.name], f.type) for f in schema),
                            pa.array([split] * rows, pa.int32())],
                           names=[*schema.names, "_cdc_split_id"])


def silver_schema() -> pa.Schema:
    return pa.schema([*SOURCE.arrow_schema, ("_cdc_offset", pa.string()),
                      ("_cdc_op", pa.string()), ("_cdc_ts", pa.timestamp("us", tz="UTC"))])


def bronze_of_two_reads(tmp_path) -> tuple[Lake, list[SplitRef]]:
    """Bronze holding two reads: splits 0-1 (attempt a, one file) and 2-4 (attempt b)."""
    lake = Lake.open(engines.start("sail"), str(tmp_path))  # the engine is never started
    bronze.write_splits(lake, SOURCE, [source_rows(0, 300, 0), source_rows(300, 200, 1)],
                        "a", "000001:000000000100:000000", READ_AT, create=True)
    bronze.write_splits(lake, SOURCE, [source_rows(500, 100, s) for s in (2, 3, 4)],
                        "b", "000001:000000000200:000000", READ_AT + dt.timedelta(seconds=1))
    return lake, [SplitRef(0, "a", "000001:000000000100:000000"),
                  SplitRef(1, "a", "000001:000000000100:000000"),
                  *(SplitRef(s, "b", "000001:000000000200:000000") for s in (2, 3, 4))]


def silver_rows(path: str) -> pa.Table:
    table = DeltaTable(path).to_pyarrow_table()
    return table.sort_by("id")


@pytest.mark.parametrize("splice_bytes", [0, 2**40], ids=["spliced", "rewritten"])
def test_silver_made_of_bronze_files_holds_the_rows_written_from_bronze_rows(
        tmp_path, monkeypatch, splice_bytes):
    """The same rows, values bit for bit (NaN, -0.0, NULLs, decimals), and the same file
    statistics, as silver written from bronze's rows read back (snapshot_rows), whether
    bronze's files are spliced or (small ones) read and written again."""
    monkeypatch.setattr(first_version, "SPLICE_BYTES", splice_bytes)
    lake, splits = bronze_of_two_reads(tmp_path)
    schema, made, written = silver_schema(), str(tmp_path / "made"), str(tmp_path / "written")
    actions = first_version.take(lake, SOURCE, splits, schema, made)
    assert actions is not None and len(actions) == 2
    lake.tables.create_with_files(made, schema, actions)
    window = Window("", "000001:000000000300:000000", {SOURCE.qualified: tuple(splits)},
                    first=True)
    lake.tables.create_from_streams(written, schema,
                                    small_merge.snapshot_rows(lake, SOURCE, window, schema))
    a, b = silver_rows(made), silver_rows(written)
    assert a.schema == b.schema and a.num_rows == 800
    assert bits(a).equals(bits(b))  # bit for bit: floats compared as their bits

    def stats(path: str) -> list:  # as the creating commit has them
        with open(os.path.join(path, "_delta_log", f"{0:020d}.json")) as log:
            adds = [json.loads(line)["add"] for line in log if '"add"' in line]
        return sorted((json.loads(a["stats"], parse_float=decimal.Decimal) for a in adds),
                      key=lambda s: s["minValues"]["id"])

    assert stats(made) == stats(written)


@pytest.mark.parametrize("how", ["a column bronze lacks", "a killed read's rows", "no splits",
                                 "a splice refused"])
def test_bronze_files_that_cannot_be_taken_leave_nothing_behind(tmp_path, monkeypatch, how):
    monkeypatch.setattr(first_version, "SPLICE_BYTES", 0)
    lake, splits = bronze_of_two_reads(tmp_path)
    schema, made = silver_schema(), str(tmp_path / "made")
    if how == "a column bronze lacks":  # the source gained a column after the snapshot
        schema = pa.schema([*list(schema)[:6], ("n", pa.int32()), *list(schema)[6:]])
    elif how == "a killed read's rows":
        splits = splits[:2]  # b's rows are in bronze, state does not record them
    elif how == "no splits":
        splits = []
    else:  # the second file refused, once the first is made
        real, calls = parquet_splice.splice, []

        def refuse_second(*args):
            calls.append(1)
            if len(calls) > 1:
                raise parquet_splice.Unspliceable("refused")
            return real(*args)

        monkeypatch.setattr(parquet_splice, "splice", refuse_second)
    assert first_version.take(lake, SOURCE, splits, schema, made) is None
    assert not os.path.exists(made) or not os.listdir(made)


def test_files_spliced_during_the_snapshot_are_taken_when_they_hold_what_take_would_make(
        tmp_path, monkeypatch):
    """`splice_ahead` after each read makes its big files aside; `take` moves those that are
    silver's columns at the window's watermark, and makes the others itself."""
    monkeypatch.setattr(first_version, "SPLICE_BYTES", 0)
    lake, splits = bronze_of_two_reads(tmp_path)
    schema, made, ahead = silver_schema(), str(tmp_path / "made"), str(tmp_path / "ahead")
    target = first_version.Target(ahead, schema)
    first_version.splice_ahead(lake, SOURCE, "a", "000001:000000000100:000000", [target])
    first_version.splice_ahead(lake, SOURCE, "b", "000001:000000000999:000000", [target])
    staged = sorted(os.listdir(ahead))
    bronze_files = lake.tables.plain_files(lake.snapshot_path("db", "t"))
    assert sorted(staged) == sorted(bronze_files)  # each under its bronze file's name
    actions = first_version.take(lake, SOURCE, splits, schema, made, ahead)
    names = {a.path for a in actions}
    moved = [n for n in staged if n in names]  # a's, at its watermark
    assert len(moved) == 1 and not os.path.exists(os.path.join(ahead, moved[0]))
    assert os.listdir(ahead) == [n for n in staged if n not in moved]  # b's: other watermark
    lake.tables.create_with_files(made, schema, actions)
    window = Window("", "000001:000000000300:000000", {SOURCE.qualified: tuple(splits)},
                    first=True)
    written = str(tmp_path / "written")
    lake.tables.create_from_streams(written, schema,
                                    small_merge.snapshot_rows(lake, SOURCE, window, schema))
    assert bits(silver_rows(made)).equals(bits(silver_rows(written)))

