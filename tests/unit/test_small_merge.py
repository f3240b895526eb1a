"""lake/small_merge.py's pure parts: which windows it takes, and its last-change rule."""
from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from cdc_sql.config.model import Table
from cdc_sql.lake.silver.facts import Facts
from cdc_sql.lake.silver.plan import plan_silver
from cdc_sql.lake.small_merge import last_change_per_key, unsuitable
from cdc_sql.source.schema import Column, SourceTable, arrow_type
from cdc_sql.window import SplitRef, Window

SOURCE = SourceTable("db", "t", (Column("id", "int", "int", 10, 0, None, None),
                                 Column("v", "varchar", "varchar(10)", None, None, None, 10)),
                     ("id",))
ENGINE = {"_cdc_offset": pa.string(), "_cdc_op": pa.string(),
          "_cdc_ts": pa.timestamp("us", tz="UTC")}


def plan(source=SOURCE, **spec):
    return plan_silver(Table(name="t", source=source.qualified, **spec), [source], "p.yaml", 0)


def facts(source=SOURCE, statements=(), snapshot=None, silver=True, **silver_changes):
    """Facts of a table whose bronze and silver hold the source's columns (plus engine ones)."""
    row = {c.name: arrow_type(c.spark_type) for c in source.columns}
    bronze = {**row, **ENGINE}
    snapshot = {**row, "_cdc_split_id": pa.int32()} if snapshot is None else snapshot
    silver = {**row, **ENGINE, **silver_changes} if silver else {}
    return Facts({source.qualified: snapshot}, {source.qualified: bronze},
                 {source.qualified: statements} if statements else {}, silver)


CHANGES = Window("00001.000000000004:0", "00001.000000000009:0")


FIRST = Window("", "00001.000000000009:0",
               {"db.t": (SplitRef(0, "a1", "00001.000000000002:0"),)}, first=True)


def test_a_plain_window_is_merged_here():
    assert unsuitable(plan(), CHANGES, facts()) is None
    assert unsuitable(plan(), FIRST, facts(silver=False)) is None  # silver is created here
    assert unsuitable(plan(), FIRST, facts()) is None  # a replay: silver was created


@pytest.mark.parametrize("case, expected", [
    (lambda: (plan(projection="SELECT id FROM t"), CHANGES, facts()), "not a plain table"),
    (lambda: (plan(history=True), CHANGES, facts()), "history: its versions"),
    (lambda: (plan(), replace(CHANGES, splits={}), facts()), "snapshot rows in a later"),
    (lambda: (plan(), replace(FIRST, replace=True), facts()), "a re-snapshot"),
    (lambda: (plan(), FIRST, facts(snapshot={"id": pa.int32()})), "snapshot columns differ"),
    (lambda: (plan(), CHANGES, facts(statements=(("ddl", "o", None, "ALTER TABLE t"),))),
     "a DDL statement"),
    (lambda: (plan(), CHANGES, facts(v=pa.int64())), "silver's columns differ"),
    (lambda: (plan(), CHANGES, facts(extra=pa.string())), "silver's columns differ"),
])
def test_windows_the_engine_must_merge(case, expected):
    assert expected in unsuitable(*case())


def test_bronze_columns_unlike_the_source_go_to_the_engine():
    widened = SourceTable("db", "t", (SOURCE.columns[0],
                                      Column("v", "varchar", "varchar(10)", None, None, None, 10),
                                      Column("w", "int", "int", 10, 0, None, None)), ("id",))
    assert "bronze's columns differ" in unsuitable(plan(widened), CHANGES, facts())


def test_temporal_and_nullable_keys_go_to_the_engine_and_wide_decimals_are_merged_here():
    dated = SourceTable("db", "t", (Column("d", "date", "date", None, None, None, None),
                                    SOURCE.columns[1]), ("d",))
    assert "temporal" in unsuitable(plan(dated), CHANGES, facts(dated))
    nullable = replace(SOURCE, key_nullable=True)
    assert "nullable" in unsuitable(plan(nullable), CHANGES, facts(nullable))
    wide = SourceTable("db", "t", (SOURCE.columns[0],
                                   Column("m", "decimal", "decimal(30,2)", 30, 2, None, None)),
                       ("id",))
    # silver's files rewritten here (on a local path or in an object store alike), never by
    # delta-rs's MERGE
    assert unsuitable(plan(wide), CHANGES, facts(wide)) is None


def reference(rows: list[tuple[int, str, bool, int]]) -> dict[int, int]:
    """silver_changes.sql's rule over (key, offset, remove, row number): per key the row of the
    highest offset, at equal offsets an upsert before a removal; -> key: row number."""
    best: dict[int, tuple] = {}
    for key, offset, remove, n in rows:
        rank = (offset, not remove)
        if key not in best or rank >= best[key][0]:
            best[key] = (rank, n)
    return {key: n for key, (_, n) in best.items()}


OFFSETS = ["000001:000000000900:000002", "000001:000000001000:000000",
           "000001:000000001000:000001", "000002:000000000004:000000"]  # in order


def captured_order(row: tuple) -> tuple:
    """Where a change stands in a window read back as captured: by offset, a removal before
    an upsert at the same offset."""
    return row[1], not row[2]


@settings(deadline=None)  # Arrow's first calls can take longer on a busy machine
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(OFFSETS), st.booleans()),
                max_size=40), st.booleans())
def test_last_change_per_key_follows_the_sql_rule(changes, as_captured):
    """In any order, and in the order of a window read back as captured (no sort then)."""
    # at one offset a key has at most one removal and one upsert (an UPDATE of its key)
    seen, rows = set(), []
    for key, offset, remove in (sorted(changes, key=captured_order) if as_captured else changes):
        if (key, offset, remove) not in seen:
            seen.add((key, offset, remove))
            rows.append((key, offset, remove, len(rows)))
    table = pa.table({"id": [r[0] for r in rows], "_cdc_offset": [r[1] for r in rows],
                      "_cdc_remove": [r[2] for r in rows], "n": [r[3] for r in rows]},
                     schema=pa.schema([("id", pa.int64()), ("_cdc_offset", pa.string()),
                                       ("_cdc_remove", pa.bool_()), ("n", pa.int64())]))
    last = last_change_per_key(table, ["id"])
    assert dict(zip(last["id"].to_pylist(), last["n"].to_pylist())) == reference(rows)
    assert last.column_names == table.column_names


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(OFFSETS), st.booleans()),
                min_size=1, max_size=40), st.randoms(use_true_random=False), st.integers(1, 8))
def test_a_window_of_files_read_back_in_any_order_follows_the_sql_rule(changes, shuffle,
                                                                       files):
    """Bronze's files are read back in any order, each in the order it was captured."""
    seen, rows = set(), []
    for key, offset, remove in sorted(changes, key=captured_order):
        if (key, offset, remove) not in seen:
            seen.add((key, offset, remove))
            rows.append((key, offset, remove, len(rows)))
    schema = pa.schema([("id", pa.int64()), ("_cdc_offset", pa.string()),
                        ("_cdc_remove", pa.bool_()), ("n", pa.int64())])
    cuts = sorted({0, len(rows), *(shuffle.randrange(len(rows) + 1) for _ in range(files))})
    pieces = [pa.RecordBatch.from_pylist([dict(zip(schema.names, r)) for r in rows[a:b]],
                                         schema) for a, b in zip(cuts, cuts[1:])]
    shuffle.shuffle(pieces)
    last = last_change_per_key(pa.Table.from_batches(pieces, schema), ["id"])
    assert dict(zip(last["id"].to_pylist(), last["n"].to_pylist())) == reference(rows)


@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(OFFSETS), st.booleans()),
                max_size=12))
def test_a_window_is_taken_as_ordered_exactly_when_sorting_would_not_move_it(rows):
    from cdc_sql.lake.small_merge import _in_order

    offsets = pa.chunked_array([pa.array([r[1] for r in rows], pa.string())])
    removes = pa.chunked_array([pa.array([r[2] for r in rows], pa.bool_())])
    assert _in_order(offsets, removes) is ([captured_order(r) for r in rows] ==
                                           sorted(captured_order(r) for r in rows))


def test_the_memory_budget_counts_changes_and_silver():
    from cdc_sql.lake import small_merge

    silver = 10 * 2**20
    room = small_merge.MEMORY_BUDGET - small_merge.MERGE_PER_SILVER_BYTE * silver
    assert small_merge.fits(room, silver) and not small_merge.fits(room + 1, silver)
    assert not small_merge.fits(0, small_merge.MEMORY_BUDGET)


def test_rows_of_megabytes_are_merged_by_rewriting_files_within_the_budget():
    """delta-rs's MERGE holds batches of 8,192 rows: rows past WIDE_ROW_BYTES go to
    lake/file_merge.py, by their Arrow bytes, however small their Parquet (unless silver is
    not `rewritable`: a change data feed); narrow rows stay with delta-rs's `fits`."""
    from cdc_sql.lake import small_merge
    from cdc_sql.lake.parquet_files import ROW_GROUP_BYTES

    wide, mb = small_merge.WIDE_ROW_BYTES, 2**20
    assert small_merge.merger(175 * mb, 15, 15 * mb, rewritable=True) == "files"
    larger = small_merge.SMALL_SILVER_BYTES + 1
    assert small_merge.merger(wide * 100, 100, larger, rewritable=True) == "files"
    assert small_merge.merger(wide * 100 - 1, 100, larger, rewritable=True) == "delta-rs"
    assert small_merge.merger(175 * mb, 15, 15 * mb, rewritable=False) == "delta-rs"
    # decimals wider than 64 bits: never delta-rs's MERGE (it writes their statistics wrong)
    assert small_merge.merger(mb, 15, mb, rewritable=True, delta_rs=False) == "files"
    assert small_merge.merger(mb, 15, mb, rewritable=False, delta_rs=False) is None
    room = small_merge.MEMORY_BUDGET - 2 * ROW_GROUP_BYTES
    assert small_merge.merger(room, 1, 10**12, rewritable=True) == "files"
    assert small_merge.merger(room + 1, 1, 0, rewritable=True) is None  # the engine's SQL


def test_windows_into_a_small_silver_are_merged_by_rewriting_files():
    """Into a silver of SMALL_SILVER_BYTES or less, rewriting its files is the quicker (a
    schema per tenant: thousands of small tables, each paying delta-rs's planning); past
    it, delta-rs's MERGE; never where silver is not rewritable or the changes pass what a
    rewrite may hold."""
    from cdc_sql.lake import small_merge

    small, kb = small_merge.SMALL_SILVER_BYTES, 2**10
    assert small_merge.merger(kb, 10, 0, rewritable=True) == "files"
    assert small_merge.merger(kb, 10, small, rewritable=True) == "files"
    assert small_merge.merger(kb, 10, small + 1, rewritable=True) == "delta-rs"
    assert small_merge.merger(kb, 10, small, rewritable=False) == "delta-rs"
    many = 300 * 2**20  # past what a rewrite may hold, within delta-rs's MERGE
    assert small_merge.files_bound(many) > small_merge.MEMORY_BUDGET
    assert small_merge.merger(many, 10**6, 0, rewritable=True) == "delta-rs"


@given(st.integers(0, 2**30), st.integers(1, 10**7), st.integers(0, 2**34), st.booleans())
def test_a_silver_too_large_for_delta_rs_is_merged_by_rewriting_files(changes, rows, silver,
                                                                      rewritable):
    """delta-rs's MERGE holds the silver files it rewrites (MERGE_PER_SILVER_BYTE): past its
    budget a window goes to lake/file_merge.py, whose memory follows the changes alone, where
    silver is rewritable; the engine's SQL takes only what neither bounds."""
    from cdc_sql.lake import small_merge
    from cdc_sql.lake.parquet_files import ROW_GROUP_BYTES

    way = small_merge.merger(changes, rows, silver, rewritable)
    wide = changes >= small_merge.WIDE_ROW_BYTES * rows
    held = (changes if wide else small_merge.FILES_PER_CHANGE_BYTE * changes) + \
        2 * ROW_GROUP_BYTES
    if way == "delta-rs":
        assert small_merge.fits(changes, silver) and not (wide and rewritable)
        assert not (rewritable and silver <= small_merge.SMALL_SILVER_BYTES and
                    held <= small_merge.MEMORY_BUDGET)
    elif way == "files":
        assert rewritable and held <= small_merge.MEMORY_BUDGET
    else:
        assert not small_merge.fits(changes, silver) or (wide and rewritable)
        assert not rewritable or held > small_merge.MEMORY_BUDGET
    if rewritable and not wide and not small_merge.fits(changes, silver) and \
            held <= small_merge.MEMORY_BUDGET:
        assert way == "files"


def test_files_keeping_a_change_data_feed_are_not_rewritten_by_file_merge(tmp_path):
    """lake/file_merge.py writes no `_change_data`: such tables stay with delta-rs's MERGE
    (on any store: its files are read and written through parquet_files.table_files)."""
    from types import SimpleNamespace

    from deltalake import write_deltalake

    from cdc_sql.lake import small_merge
    from cdc_sql.lake.delta_rs_tables import DeltaRsTables

    for feed in ("true", "false"):
        path = str(tmp_path / feed)
        write_deltalake(path, pa.table({"id": [1]}),
                        configuration={"delta.enableChangeDataFeed": feed})
        lake = SimpleNamespace(tables=DeltaRsTables())
        assert small_merge._rewritable(lake, path) == (feed == "false")


def test_file_bytes_of_a_window_counts_the_files_it_may_touch(tmp_path):
    from deltalake import DeltaTable, write_deltalake

    from cdc_sql.lake.delta_rs_tables import DeltaRsTables

    path = str(tmp_path / "changes")
    for offsets in (["a1", "a5"], ["b1", "b2"], ["c1", "c9"]):
        write_deltalake(path, pa.table({"_cdc_offset": offsets, "v": [1, 2]}), mode="append")
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    size = dict(zip(actions["min._cdc_offset"].to_pylist(), actions["size_bytes"].to_pylist()))
    tables = DeltaRsTables()
    assert tables.file_bytes(path) == sum(size.values())
    assert tables.file_bytes(path, ("_cdc_offset", "a5", "b2")) == size["b1"]
    assert tables.file_bytes(path, ("_cdc_offset", "a4", "c1")) == sum(size.values())
    assert tables.file_bytes(path, ("_cdc_offset", "c9", "d")) == 0
    assert tables.file_rows(path) == 6
    assert tables.file_rows(path, ("_cdc_offset", "a5", "b2")) == 2


def test_statistics_cover_the_offset_of_tables_past_32_columns():
    """Windows are read by `_cdc_offset` (by Sail, and here to size a window): a table of more
    than 32 columns must still have its statistics, and wide decimals never."""
    from cdc_sql.lake.tables import stats_configuration

    narrow = pa.schema([("id", pa.int64()), ("_cdc_offset", pa.string())])
    assert stats_configuration(narrow) is None
    many = pa.schema([(f"c{i}", pa.int32()) for i in range(40)] +
                     [("_cdc_offset", pa.string()), ("_cdc_op", pa.string())])
    kept = stats_configuration(many)["delta.dataSkippingStatsColumns"].split(",")
    assert kept == ["`_cdc_offset`", "`_cdc_op`"] + [f"`c{i}`" for i in range(30)]
    wide = pa.schema([("id", pa.int64()), ("d", pa.decimal128(30, 2)),
                      ("_cdc_offset", pa.string())])
    assert stats_configuration(wide) == {"delta.dataSkippingStatsColumns": "`_cdc_offset`,`id`"}


def test_a_window_no_bronze_file_holds_merges_nothing_whatever_silvers_size():
    """A big table's first window, its changes none (nothing written while it was read): the
    engine is not started to MERGE nothing; a window with changes still goes by the budget."""
    from types import SimpleNamespace

    from cdc_sql.lake import small_merge

    class Tables:
        def __init__(self, window_bytes):
            self.window_bytes = window_bytes

        def file_bytes(self, path, within=None):
            return 10 * small_merge.MEMORY_BUDGET if within is None else self.window_bytes

        def file_rows(self, path, within=None):
            return self.window_bytes // 10

        def properties(self, path):  # a change data feed: not rewritten by file_merge.py
            return {"delta.enableChangeDataFeed": "true"}

        def read_within(self, *args, **kwargs):
            raise AssertionError("a window of no file read")

    def lake(window_bytes):
        return SimpleNamespace(local=True, tables=Tables(window_bytes),
                               changes_path=lambda db, name: f"{db}.{name}")

    assert small_merge._merge_changes(lake(0), plan(), FIRST, "silver") is None
    assert small_merge._merge_changes(lake(1000), plan(), FIRST, "silver") == \
        "past the memory budget (by bronze's and silver's file sizes)"


@given(st.lists(st.integers(-50, 50), max_size=60),
       st.lists(st.integers(-60, 60), max_size=6, unique=True),
       st.sampled_from([pa.int64(), pa.int32(), pa.int16()]))
def test_a_batch_is_cut_into_its_key_ranges(keys, cuts, key_type):
    """Each row goes to the range its key falls in ([None, c1), [c1, c2), ... [ck, None)),
    every row once, in its order within the range."""
    from cdc_sql.lake import small_merge

    cuts = sorted(cuts)
    batch = pa.record_batch({"id": pa.array(keys, key_type), "n": list(range(len(keys)))})
    parts = list(small_merge._by_range(batch, "id", cuts))
    bounds = [None, *cuts, None]
    for n, rows in parts:
        start, stop = bounds[n], bounds[n + 1]
        assert all((start is None or k >= start) and (stop is None or k < stop)
                   for k in rows.column("id").to_pylist())
        assert rows.column("n").to_pylist() == sorted(rows.column("n").to_pylist())
    assert sorted(i for _, rows in parts for i in rows.column("n").to_pylist()) == \
        list(range(len(keys)))
    assert len({n for n, _ in parts}) == len(parts)


def test_spill_directories_of_ended_processes_are_stale():
    from cdc_sql.lake.small_merge import stale_spills

    names = ["cdc-sql-ranges-12-abc", "cdc-sql-ranges-13-x", "cdc-sql-ranges-x", "other-12-a",
             "cdc-sql-ranges-", "cdc-sql-mariadb-12"]
    assert stale_spills(names, lambda pid: pid == 13) == ["cdc-sql-ranges-12-abc"]
    assert stale_spills(names, lambda pid: True) == []


def test_a_spill_left_by_a_killed_run_is_removed_by_the_next(tmp_path, monkeypatch):
    """A run killed while it spilled a window's key ranges leaves its directory; the next
    range merge (the killed run's window, replayed) removes it, and names its own with its
    process's id."""
    import os
    import subprocess
    import sys
    import tempfile

    from cdc_sql.lake import small_merge

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)
    left = tmp_path / f"cdc-sql-ranges-{int(ended.stdout)}-k1"
    (left / "range-0.arrow").parent.mkdir()
    (left / "range-0.arrow").write_bytes(b"x")
    mine = tmp_path / f"cdc-sql-ranges-{os.getpid()}-k2"
    mine.mkdir()  # another merge of this process's, still going
    with small_merge.spill_directory() as spill:
        assert os.path.basename(spill).startswith(f"cdc-sql-ranges-{os.getpid()}-")
        assert not left.exists() and mine.exists()
    assert not os.path.exists(spill)


def test_each_range_is_picked_in_order_the_next_while_one_is_merged(tmp_path, monkeypatch):
    """`_picked_ahead`: every range's spill file read once, in order, its last change per key
    and its change count given, and removed; a range past the memory budget gives None; the
    next range is being picked while the caller holds one (two ranges at most)."""
    import threading
    import time

    from cdc_sql.lake import small_merge

    def spill(n, keys, ops):
        path = str(tmp_path / f"range-{n}.arrow")
        table = pa.table({"id": pa.array(keys, pa.int32()),
                          "_cdc_offset": [f"000001:{i:012d}:000000" for i in range(len(keys))],
                          "_cdc_op": ops})
        with pa.ipc.new_file(path, table.schema) as writer:
            writer.write_table(table)
        return path

    parts = [((None, 10), spill(0, [1, 2, 1], ["c", "c", "u"])),
             ((10, 20), spill(1, [12, 12], ["c", "d"])),
             ((20, None), spill(2, [25], ["c"]))]
    picking = []
    original = small_merge._picked
    monkeypatch.setattr(small_merge, "_picked", lambda plan, part: (
        picking.append((part, threading.current_thread().name)), original(plan, part))[1])
    got = []
    for bounds, last, changes in small_merge._picked_ahead(plan(), parts):
        got.append((bounds, sorted(zip(last["id"].to_pylist(), last["_cdc_op"].to_pylist())),
                    changes))
        deadline = time.monotonic() + 10  # the next one starts while this one is held
        while len(picking) < min(len(got) + 1, 3) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(picking) == min(len(got) + 1, 3)
    assert got == [((None, 10), [(1, "u"), (2, "c")], 3), ((10, 20), [(12, "d")], 2),
                   ((20, None), [(25, "c")], 1)]
    assert [p for p, _ in picking] == [p for _, p in parts]
    assert all(name.startswith("range") for _, name in picking)
    assert not list(tmp_path.iterdir())
    monkeypatch.setattr(small_merge, "MEMORY_BUDGET", 1)
    again = [((None, None), spill(3, [1], ["c"]))]
    assert [(b, last, n) for b, last, n in small_merge._picked_ahead(plan(), again)] == \
        [((None, None), None, 1)]
