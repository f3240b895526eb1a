"""Property: the silver SQL equals a simple model of the source, whatever the history.

Random histories of inserts, updates, deletes and key changes; random splits with random
watermarks; random batch boundaries; random replays of a batch (a crash between the MERGE and
the state commit), random crashes between the silver and the history MERGE -- silver after every
batch equals the source as of that batch's bound, and the history table holds exactly the
model's versions since the highest watermark, its current rows equal to silver.
The SQL under test is the real one (cdc_sql/sql/*.sql on Sail), fed through real bronze tables.
"""
from __future__ import annotations

import datetime as dt
import itertools

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from hypothesis import HealthCheck, given, settings, strategies as st

from cdc_sql.config.model import Table
from cdc_sql.lake import bronze
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.merge import merge_window
from cdc_sql.lake.silver.ownership import owned_versions
from cdc_sql.lake.silver.plan import plan_silver
from cdc_sql.lake.state import TableEntry
from cdc_sql.planner import just_after
from cdc_sql.source.offsets import Offset
from cdc_sql.source.schema import Column, SourceTable
from cdc_sql.window import SplitRef, Window

KEYS = 8
TABLE = SourceTable("db", "t", (Column("id", "int", "int", 10, 0, None, None),
                                Column("v", "varchar", "varchar(10)", None, None, None, 10)),
                    ("id",))
TS = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
READ_AT = dt.datetime(2024, 1, 2, 3, 4, 5, 250000, tzinfo=dt.timezone.utc)  # a range re-read's


@pytest.fixture
def new_lake(tmp_path_factory, engine):
    """A fresh lake per call (a hypothesis example each), under pytest's temp base, which
    keeps only the last few sessions."""
    return lambda: Lake.open(engine, str(tmp_path_factory.mktemp("lake")))


def offset(txn: int, row: int) -> str:
    return Offset(1, 1000 + 100 * txn + row, 0).text


def boundary(txn: int) -> str:
    """The position after transaction `txn` (txn -1: before all of them)."""
    return Offset(1, 1000 + 100 * txn + 99, 0).text


@st.composite
def histories(draw):
    """Transactions as lists of (op, key, new_key, value) against a model that keeps them valid."""
    state: dict[int, str] = {k: f"s{k}" for k in draw(st.sets(st.integers(1, KEYS)))}
    initial = dict(state)
    txns = []
    for _ in range(draw(st.integers(1, 12))):
        txn = []
        for _ in range(draw(st.integers(1, 3))):
            key = draw(st.integers(1, KEYS))
            value = draw(st.sampled_from(["a", "b", "c", "d"]))
            if key not in state:
                txn.append(("c", key, key, value))
                state[key] = value
            else:
                op = draw(st.sampled_from(["u", "d", "k"]))
                free = [k for k in range(1, KEYS + 1) if k not in state]
                if op == "k" and free:
                    new = draw(st.sampled_from(free))
                    txn.append(("k", key, new, state.pop(key)))
                    state[new] = txn[-1][3]
                elif op == "d":
                    txn.append(("d", key, key, state.pop(key)))
                else:
                    txn.append(("u", key, key, value))
                    state[key] = value
        txns.append(txn)
    return initial, txns


def states(initial, txns):
    """The model: the table after each transaction (index -1: before all)."""
    state, out = dict(initial), {-1: dict(initial)}
    for i, txn in enumerate(txns):
        for op, key, new, value in txn:
            if op == "d":
                state.pop(key)
            elif op == "k":
                state.pop(key)
                state[new] = value
            else:
                state[key] = value
        out[i] = dict(state)
    return out


def binlog_rows(txns, after_txn: int) -> list[dict]:
    """Bronze change rows for transactions after `after_txn` (capture starts at the lowest
    watermark): the after-image, a delete's before-image."""
    rows = []
    for i, txn in enumerate(txns):
        if i <= after_txn:
            continue
        for j, (op, key, new, value) in enumerate(txn):
            base = {"_cdc_offset": offset(i, j), "_cdc_ts": TS, "_cdc_gtid": f"0-1-{i}"}
            if op == "k":  # a key change is a delete and an insert at the same offset
                rows.append({**base, "id": key, "v": value, "_cdc_op": "d"})
                rows.append({**base, "id": new, "v": value, "_cdc_op": "c"})
            else:
                rows.append({**base, "id": key, "v": value, "_cdc_op": op})
    return rows


def split_rows(ids: list[int], values: list[str], split_id: int = 0) -> pa.RecordBatch:
    """A read's rows of one split, as the snapshot readers give them."""
    return pa.RecordBatch.from_arrays(
        [pa.array(ids, pa.int32()), pa.array(values), pa.array([split_id] * len(ids), pa.int32())],
        names=["id", "v", "_cdc_split_id"])


def land_changes(lake, rows: list[dict]) -> None:
    bronze.ensure_changes_table(lake, TABLE)
    if rows:
        schema = bronze.changes_schema(TABLE)
        bronze.append_changes(lake, TABLE, pa.Table.from_pylist(rows, schema).to_batches())


def versions(initial, txns, marks, reads, bounds, upto: int, kept=lambda v: True,
             same=lambda old, new: False) -> list[tuple]:
    """The model's history through transaction `upto`: (id, v, valid_from, valid_to) from the
    last read point on, of the rows whose value is `kept` (the projection's WHERE). A key's
    version then starts at its last change after its split's watermark, or at the watermark
    (the snapshot row). An update whose value is the `same` as its version's in the tracked
    columns (history: {track: [...]}) changes that version in place."""
    start = max(reads)
    state = {k: v for k, v in states(initial, txns)[start].items() if kept(v)}
    since = {}
    for k in state:
        mark = next(m for (lo, hi), m in zip(bounds, marks) if lo <= k < hi)
        since[k] = boundary(mark)
        for i in range(mark + 1, start + 1):
            for j, (op, _, new, _) in enumerate(txns[i]):
                if new == k and op != "d":
                    since[k] = offset(i, j)
    open_ = {k: (v, since[k]) for k, v in state.items()}
    done = []

    def close(key, at):
        if key in open_:
            value, frm = open_.pop(key)
            done.append((key, value, frm, at))

    for i in range(start + 1, upto + 1):
        for j, (op, key, new, value) in enumerate(txns[i]):
            if op == "u" and kept(value) and key in open_ and same(open_[key][0], value):
                open_[key] = (value, open_[key][1])
                continue
            close(key, offset(i, j))
            if op != "d" and kept(value):
                open_[new] = (value, offset(i, j))
    return sorted(done + [(k, v, frm, None) for k, (v, frm) in open_.items()])


def drawn_splits(data, last: int, first: int = -1) -> tuple[list[tuple[int, int]], list[int]]:
    """Splits: cut points in key space (key bounds), each with its own watermark (the index of
    the last transaction before it, from `first`; -1 for none)."""
    cuts = sorted(data.draw(st.sets(st.integers(2, KEYS), max_size=3)))
    bounds = list(zip([1, *cuts], [*cuts, KEYS + 1]))
    return bounds, [data.draw(st.integers(first, last)) for _ in bounds]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), history=histories())
def test_silver_equals_model_after_every_batch(engine, new_lake, data, history):
    check_batches(new_lake(), data, history)


def check_batches(lake, data, history, projection="SELECT id, v FROM t", chosen=True,
                  same=lambda old, new: False):
    """Random splits, reads, batch bounds, replays and crashes over `history`, silver and the
    history table compared with the model after every batch. `projection` (without a WHERE;
    one may be drawn) and `chosen` (the `history` key), with `same` telling the model which
    changes keep their version."""
    initial, txns = history
    model = states(initial, txns)
    last = len(txns) - 1
    bounds, marks = drawn_splits(data, last)
    # a reader outside the watermark's snapshot (connectorx) may see later transactions: each
    # split's rows are the table as of a read point at or after its watermark
    reads = [data.draw(st.integers(mark, last)) for mark in marks]
    bronze.ensure_snapshot_table(lake, TABLE)
    for split_id, ((lo, hi), mark, read) in enumerate(zip(bounds, marks, reads)):
        rows = sorted((k, v) for k, v in model[read].items() if lo <= k < hi)
        batch = split_rows([k for k, _ in rows], [v for _, v in rows], split_id)
        bronze.write_splits(lake, TABLE, [batch], "a1", boundary(mark), TS)
        # an abandoned attempt's rows must never count
        bronze.write_splits(lake, TABLE, [batch], "stale", boundary(-1), TS)
    bronze.ensure_statements_table(lake)
    land_changes(lake, binlog_rows(txns, min(marks)))
    # sometimes a projection whose WHERE leaves rows out (and takes them in again)
    where = data.draw(st.sampled_from(["", " WHERE v <> 'c'"]))
    kept = (lambda v: v != "c") if where else (lambda v: True)
    projection = projection + where if where or chosen is not True else ""
    plan = plan_silver(Table(name="t", source="db.t", projection=projection, history=chosen),
                       [TABLE], "prop.yaml", 0)
    silver_only = plan_silver(Table(name="t", source="db.t", projection=projection), [TABLE],
                              "prop.yaml", 0)
    done = {"db.t": tuple(SplitRef(i, "a1", boundary(mark)) for i, mark in enumerate(marks))}

    def expected_silver(u):
        return {k: v for k, v in model[u].items() if kept(v)}

    def expected_history(u):
        return versions(initial, txns, marks, reads, bounds, u, kept, same)

    recorded = [None]  # the table's entry as state records it after each window

    def merge(plan, applied, u):
        if applied:  # an attempt that reached history makes the next one match every version
            merge_window(lake, plan, Window(applied, boundary(u)), recorded=recorded[0])
        else:  # the first batch: history starts past every read
            merge_window(lake, plan, Window("", boundary(u), done, first=True,
                                            history_start=history_start))

    # batch bounds: the first past every read (as the pipeline waits for history), then random
    # steps to the end
    upto = sorted({data.draw(st.integers(max(reads), last)), last})
    history_start = boundary(max(reads))
    applied = ""
    for u in upto:
        if data.draw(st.booleans()):  # a crash between the silver and the history MERGE
            merge(silver_only, applied, max(reads) if not applied else u)
        for _ in range(1 + data.draw(st.integers(0, 1))):  # sometimes replay (crash before commit)
            merge(plan, applied, u)
        if data.draw(st.booleans()) and u != upto[-1]:
            # a crash after the MERGE, then a rerun with a wider window, as a restart would do
            merge(plan, applied, last)
            u = last
            assert_silver(lake, expected_silver(u))
            assert_history(lake, expected_history(u))
            break
        applied = boundary(u)
        recorded[0] = as_recorded(lake)
        assert_silver(lake, expected_silver(u))
        assert_history(lake, expected_history(u))


def assert_silver(lake, expected: dict[int, str]):
    engine = lake.engine
    silver = engine.read(lake.silver_path("t")).select("id", "v").orderBy("id")
    want = engine.spark.createDataFrame(sorted(expected.items()), silver.schema).orderBy("id")
    assert_df_equality(silver, want, ignore_nullable=True)


def assert_history(lake, expected: list[tuple]):
    engine = lake.engine
    history = engine.read(lake.history_path("t"))
    got = history.select("id", "v", "_cdc_valid_from", "_cdc_valid_to").orderBy(
        "id", "_cdc_valid_from")
    want = engine.spark.createDataFrame(expected, got.schema).orderBy("id", "_cdc_valid_from")
    assert_df_equality(got, want, ignore_nullable=True)
    current = history.where("_cdc_current").select("id", "v").orderBy("id")
    silver = engine.read(lake.silver_path("t")).select("id", "v").orderBy("id")
    assert_df_equality(current, silver, ignore_nullable=True)
    assert history.where("_cdc_current <> (_cdc_valid_to IS NULL)").count() == 0


def test_model_sanity():
    initial, txns = {1: "x"}, [[("k", 1, 2, "x")], [("c", 1, 1, "y")]]
    assert states(initial, txns)[1] == {2: "x", 1: "y"}
    assert len(list(itertools.chain(binlog_rows(txns, -1)))) == 3


def first_window(upto: str, splits) -> Window:
    return Window("", upto, {"db.t": tuple(splits)}, first=True)


def test_an_older_window_never_overwrites_a_newer_row(engine, new_lake):
    """The offset guard: replaying an old window (e.g. a second, late run) keeps newer rows."""
    lake = new_lake()
    txns = [[("u", 1, 1, "old")], [("u", 1, 1, "new")]]  # over the snapshot {1: s1, 2: s2}
    bronze.ensure_snapshot_table(lake, TABLE)
    bronze.write_splits(lake, TABLE, [split_rows([1, 2], ["s1", "s2"])], "a1", boundary(-1), TS)
    bronze.ensure_statements_table(lake)
    land_changes(lake, binlog_rows(txns, -1))
    plan = plan_silver(Table(name="t", source="db.t"), [TABLE], "prop.yaml", 0)
    merge_window(lake, plan, first_window(boundary(0), [SplitRef(0, "a1", boundary(-1))]))
    merge_window(lake, plan, Window(boundary(0), boundary(1)))
    merge_window(lake, plan, first_window(boundary(0), [SplitRef(0, "a1", boundary(-1))]))  # stale replay
    assert_silver(lake, {1: "new", 2: "s2"})


def test_the_first_batch_writes_snapshot_rows_and_merges_only_changes(engine, new_lake,
                                                                     monkeypatch):
    """The first batch's MERGE source is the binlog changes alone (the snapshot rows go into
    silver by the append that creates it): a 10M-row first batch must not push every row
    through the last-change-per-key join (3.4 GB on Sail, against 1.7 GB). (The engine's
    route: lake/small_merge.py would take this small plain table.)"""
    from deltalake import DeltaTable

    from cdc_sql.lake import small_merge

    monkeypatch.setattr(small_merge, "merged", lambda *_: False)

    lake = new_lake()
    bronze.ensure_snapshot_table(lake, TABLE)
    ids = list(range(1, 101))
    bronze.write_splits(lake, TABLE, [split_rows(ids, ["s"] * 100)], "a1", boundary(0), TS)
    txns = [[("u", 1, 1, "early")], [("u", 2, 2, "late")], [("d", 3, 3, "s")]]
    bronze.ensure_statements_table(lake)
    land_changes(lake, binlog_rows(txns, -1))
    plan = plan_silver(Table(name="t", source="db.t"), [TABLE], "prop.yaml", 0)
    window = first_window(boundary(2), [SplitRef(0, "a1", boundary(0))])
    merge_window(lake, plan, window)

    created = DeltaTable(lake.silver_path("t"), version=0).to_pyarrow_table()
    assert sorted(created.column("id").to_pylist()) == ids  # silver's first commit: the rows
    assert engine.spark.table("cdc_changes_t").count() == 3  # the MERGE's source: changes only
    expected = {k: "s" for k in ids if k != 3} | {2: "late"}  # txn 0 is in the split's rows
    assert_silver(lake, expected)
    merge_window(lake, plan, window)  # a rerun appends nothing twice
    assert_silver(lake, expected)


def land_resnapshot(lake, data, model, txns, last: int):
    """Bronze as a re-snapshot from a drawn start S leaves it: splits (attempt `new`) read at
    drawn points between their watermark and `last`, and the binlog's changes after S. The
    re-snapshot's window, and the start, splits and reads drawn."""
    start = data.draw(st.integers(-1, last))  # the re-snapshot's start S
    bronze.reset(lake, TABLE)
    bounds, marks = drawn_splits(data, last, start)
    reads = [data.draw(st.integers(mark, last)) for mark in marks]
    for split_id, ((lo, hi), mark, read) in enumerate(zip(bounds, marks, reads)):
        rows = sorted((k, v) for k, v in model[read].items() if lo <= k < hi)
        bronze.write_splits(lake, TABLE, [split_rows([k for k, _ in rows], [v for _, v in rows],
                                                     split_id)], "new", boundary(mark), TS)
    land_changes(lake, binlog_rows(txns, start))
    done = {"db.t": tuple(SplitRef(i, "new", boundary(mark)) for i, mark in enumerate(marks))}
    return Window(boundary(start), boundary(last), done, replace=True), start, bounds, marks, reads


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), history=histories())
def test_a_resnapshot_replaces_any_silver_with_the_model(engine, new_lake, data, history):
    """Whatever silver and history held (changes lost to a purge, a table broken by hand), a
    re-snapshot starting at any boundary S, its splits read at watermarks past S and the
    changes captured after S, gives silver equal to the source, replays included; history's
    current versions equal silver, one per key."""
    initial, txns = history
    model = states(initial, txns)
    last = len(txns) - 1
    lake = new_lake()
    before = Offset(0, 5, 0).text  # silver as it stood: older than anything below
    old = data.draw(st.dictionaries(st.integers(1, KEYS), st.sampled_from(["a", "x", "y"])))
    bronze.ensure_snapshot_table(lake, TABLE)
    bronze.write_splits(lake, TABLE, [split_rows(sorted(old), [old[k] for k in sorted(old)])],
                        "old", before, TS)
    bronze.ensure_statements_table(lake)
    bronze.ensure_changes_table(lake, TABLE)
    plan = plan_silver(Table(name="t", source="db.t", history=True), [TABLE], "prop.yaml", 0)
    merge_window(lake, plan, Window("", before, {"db.t": (SplitRef(0, "old", before),)}, first=True,
                                    history_start=before))
    assert_silver(lake, old)

    window, *_ = land_resnapshot(lake, data, model, txns, last)
    for _ in range(1 + data.draw(st.integers(0, 1))):  # a replay: killed before state had it
        merge_window(lake, plan, window)
        assert_silver(lake, model[last])
    history = engine.read(lake.history_path("t"))
    current = history.where("_cdc_current").select("id", "v").orderBy("id")
    assert_df_equality(current, engine.read(lake.silver_path("t")).select("id", "v").orderBy("id"),
                       ignore_nullable=True)
    assert history.where("_cdc_current <> (_cdc_valid_to IS NULL)").count() == 0
    gone = set(old) - set(model[last])  # keys the re-snapshot no longer finds end at :upto
    ended = {r.id for r in history.where(f"_cdc_valid_to = '{boundary(last)}'").collect()}
    assert gone <= ended


def in_process_merges(monkeypatch, way: str) -> list:
    """Sends in-process MERGEs `way` ("delta-rs"; "files": lake/file_merge.py, taken for
    rows of any width here, its files rewritten a row group at a time; "whole": the same,
    silver merged whole as a small one is; "ranges": every window past the memory budget,
    merged by rewriting files in five key ranges); the list returned gets an entry per MERGE
    as it is carried out, a false one for a MERGE another way."""
    from cdc_sql.lake import delta_rs_tables, file_merge, small_merge

    merges = []
    if way == "delta-rs":  # into silver of any size (a small one is rewritten by default)
        monkeypatch.setattr(small_merge, "SMALL_SILVER_BYTES", -1)
    if way == "ranges":
        monkeypatch.setattr(small_merge, "merger", lambda *_: None)
        monkeypatch.setattr(small_merge, "range_count", lambda *_: 5)
        real_add = file_merge.Rewrite.add
        monkeypatch.setattr(file_merge.Rewrite, "add",
                            lambda self, *args: merges.append(True) or real_add(self, *args))
    if way in ("files", "whole"):
        monkeypatch.setattr(small_merge, "WIDE_ROW_BYTES", 0)
        if way == "files":
            monkeypatch.setattr(file_merge, "WHOLE_ROWS", -1)
        real_merge = file_merge.Rewrite.add if way == "files" else file_merge._merge_whole
        monkeypatch.setattr(file_merge.Rewrite if way == "files" else file_merge,
                            "add" if way == "files" else "_merge_whole",
                            lambda *args: merges.append(args) or real_merge(*args))
    real = delta_rs_tables.DeltaRsTables.merge_changes
    monkeypatch.setattr(delta_rs_tables.DeltaRsTables, "merge_changes",
                        lambda self, *args: merges.append(way == "delta-rs") or
                        real(self, *args))
    return merges


@pytest.mark.parametrize("way", ["delta-rs", "files", "whole", "ranges"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), history=histories())
def test_windows_merged_by_delta_rs_equal_the_engine_merge(engine, new_lake, monkeypatch, way,
                                                            data, history):
    """lake/small_merge.py against the engine's SQL: over the same bronze (random histories,
    splits at random watermarks, random batch bounds, replays), silver created and merged in
    this process (by delta-rs, or by rewriting files as rows of megabytes are) and silver
    created and merged by the engine are the same rows, `_cdc_*` columns included, after every
    batch, and equal to the model."""
    from deltalake import DeltaTable

    from cdc_sql.lake import small_merge

    merges = in_process_merges(monkeypatch, way)
    initial, txns = history
    model = states(initial, txns)
    last = len(txns) - 1
    bounds, marks = drawn_splits(data, last)
    plan = plan_silver(Table(name="t", source="db.t"), [TABLE], "prop.yaml", 0)
    done = {"db.t": tuple(SplitRef(i, "a1", boundary(mark)) for i, mark in enumerate(marks))}
    lakes = [new_lake(), new_lake()]  # in this process, by the engine
    for lake in lakes:
        bronze.ensure_snapshot_table(lake, TABLE)
        for split_id, ((lo, hi), mark) in enumerate(zip(bounds, marks)):
            rows = sorted((k, v) for k, v in model[mark].items() if lo <= k < hi)
            bronze.write_splits(lake, TABLE, [split_rows([k for k, _ in rows],
                                                         [v for _, v in rows], split_id)],
                                "a1", boundary(mark), TS)
        bronze.ensure_statements_table(lake)
        land_changes(lake, binlog_rows(txns, min(marks)))

    def by_engine(merge, *args):
        with monkeypatch.context() as patch:
            patch.setattr(small_merge, "merged", lambda *_: False)
            merge(*args)

    first = Window("", boundary(max(marks)), done, first=True)
    merge_window(lakes[0], plan, first)
    by_engine(merge_window, lakes[1], plan, first)
    applied = boundary(max(marks))
    for u in sorted({data.draw(st.integers(max(marks), last)), last}):
        for _ in range(1 + data.draw(st.integers(0, 1))):  # sometimes replayed
            merge_window(lakes[0], plan, Window(applied, boundary(u)))
            by_engine(merge_window, lakes[1], plan, Window(applied, boundary(u)))
        here, there = (engine.read(lake.silver_path("t")).orderBy("id") for lake in lakes)
        assert_df_equality(here, there, ignore_nullable=True)
        assert_silver(lakes[0], model[u])
        applied = boundary(u)
    assert bool(merges) == (last > min(marks))  # every window's changes went that way
    assert all(merges)  # and none the other
    created = DeltaTable(lakes[0].silver_path("t")).history()[-1]
    assert created["version"] == 0 and created["clientVersion"].startswith("delta-rs")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), history=histories())
def test_a_range_reread_repairs_its_range_whatever_silver_held_there(engine, new_lake, data,
                                                                     history):
    """A range re-read (`resnapshot --where`, `verify --repair`): silver wrong anywhere inside
    a key range (rows missing, changed, or never at the source), the range read at a watermark W
    past the applied offset and at a read point past W, merged with the binlog changes from the
    applied offset on, replays and a crash between silver and history included: silver equals
    the source (its live rows, with soft deletes), and history's current versions equal silver,
    one per key."""
    initial, txns = history
    model = states(initial, txns)
    last = len(txns) - 1
    lo = data.draw(st.integers(1, KEYS))
    hi = data.draw(st.integers(lo, KEYS))
    inside = range(lo, hi + 1)
    wrong = data.draw(st.dictionaries(st.sampled_from(list(inside)), st.sampled_from(["a", "z"])))
    silver0 = {k: v for k, v in initial.items() if k not in inside} | wrong
    soft = data.draw(st.booleans())
    lake = new_lake()
    bronze.ensure_snapshot_table(lake, TABLE)
    bronze.write_splits(lake, TABLE, [split_rows(sorted(silver0),
                                                 [silver0[k] for k in sorted(silver0)])],
                        "a0", boundary(-1), TS)
    bronze.ensure_statements_table(lake)
    land_changes(lake, binlog_rows(txns, -1))
    spec = dict(name="t", source="db.t", deletes="soft" if soft else "hard")
    plan = plan_silver(Table(**spec, history=True), [TABLE], "prop.yaml", 0)
    silver_only = plan_silver(Table(**spec), [TABLE], "prop.yaml", 0)
    splits = {"db.t": (SplitRef(0, "a0", boundary(-1)),)}
    merge_window(lake, plan, Window("", boundary(-1), splits, first=True,
                                    history_start=boundary(-1)))
    mark = data.draw(st.integers(-1, last))      # the read's watermark W
    read = data.draw(st.integers(mark, last))    # what a reader outside W's snapshot saw
    applied = data.draw(st.integers(-1, mark))   # silver's applied offset when it was asked for
    if applied > -1:
        merge_window(lake, plan, Window(boundary(-1), boundary(applied)))
    rows = sorted((k, v) for k, v in model[read].items() if k in inside)
    bronze.write_splits(lake, TABLE, [split_rows([k for k, _ in rows], [v for _, v in rows], 1)],
                        "r1", boundary(mark), READ_AT)
    at = just_after(boundary(mark))  # where the planner places the read's rows
    window = Window(boundary(applied), boundary(last), {"db.t": (SplitRef(1, "r1", at),)},
                    ranges=(("db.t", f"id BETWEEN {lo} AND {hi}", at, READ_AT.isoformat()),),
                    ranged=1)
    if data.draw(st.booleans()):  # killed between the silver and the history MERGE
        merge_window(lake, silver_only, window)
    for _ in range(1 + data.draw(st.integers(0, 1))):  # a replay: killed before state had it
        merge_window(lake, plan, window)
    silver = engine.read(lake.silver_path("t"))
    live = silver.where("NOT _cdc_deleted") if soft else silver
    want = engine.spark.createDataFrame(sorted(model[last].items()),
                                        live.select("id", "v").schema).orderBy("id")
    assert_df_equality(live.select("id", "v").orderBy("id"), want, ignore_nullable=True)
    history = engine.read(lake.history_path("t"))
    current = history.where("_cdc_current").select("id", "v").orderBy("id")
    assert_df_equality(current, live.select("id", "v").orderBy("id"), ignore_nullable=True)
    assert history.where("_cdc_current <> (_cdc_valid_to IS NULL)").count() == 0
    # The removes stand at the read's time, in silver and in history, replays or not (they
    # took the time of each MERGE: a replay after a kill between the two differed).
    ended = history.where(f"_cdc_valid_to = '{at}'").select("_cdc_valid_to_ts").collect()
    flagged = silver.where(f"_cdc_deleted AND _cdc_offset = '{at}'").select("_cdc_ts") \
        .collect() if soft else []
    assert {r[0] for r in ended + flagged} <= {READ_AT.replace(tzinfo=None)}, ended + flagged


def history_of_two_updates(new_lake):
    """A lake whose table (history on) has had its first window, and whose bronze holds two
    updates of key 1 past it (s1, then b, then c); the plan."""
    lake = new_lake()
    bronze.ensure_snapshot_table(lake, TABLE)
    bronze.write_splits(lake, TABLE, [split_rows([1, 2], ["s1", "s2"])], "a1", boundary(-1), TS)
    bronze.ensure_statements_table(lake)
    land_changes(lake, binlog_rows([[("u", 1, 1, "b")], [("u", 1, 1, "c")]], -1))
    plan = plan_silver(Table(name="t", source="db.t", history=True), [TABLE], "prop.yaml", 0)
    merge_window(lake, plan, Window("", boundary(-1), {"db.t": (SplitRef(0, "a1", boundary(-1)),)},
                                    first=True, history_start=boundary(-1)))
    return lake, plan


def as_recorded(lake) -> TableEntry:
    """Table `t`'s entry as state records it after a window (owned_versions: silver's and
    history's versions, history's id)."""
    return TableEntry(table="t", **owned_versions(lake, Table(name="t", source="db.t",
                                                               history=True)))


TWO_UPDATES = [(1, "s1", boundary(-1), offset(0, 0)), (1, "b", offset(0, 0), offset(1, 0)),
               (1, "c", offset(1, 0), None), (2, "s2", boundary(-1), None)]


def test_history_matches_its_current_versions_unless_an_attempt_reached_it(engine, new_lake):
    """History is partitioned by `_cdc_current`. A window no attempt of which reached history
    (nothing but maintenance since the version state recorded) matches its current versions
    only; a replay matches every version, so a version a later change of the same window
    closed is there once however often the window runs."""
    from deltalake import DeltaTable

    lake, plan = history_of_two_updates(new_lake)
    history = lake.history_path("t")
    assert DeltaTable(history).metadata().partition_columns == ["_cdc_current"]
    recorded = as_recorded(lake)
    lake.tables.compact_and_vacuum(history, 0)  # maintenance leaves it untouched
    for _ in range(3):  # replayed: killed before its state commit
        merge_window(lake, plan, Window(boundary(-1), boundary(1)), recorded=recorded)
    merges = [str(c["operationParameters"]) for c in DeltaTable(history).history()
              if c["operation"] == "MERGE"]
    assert len(merges) == 1 and "_cdc_current" in merges[0]  # the replays change nothing
    assert_history(lake, TWO_UPDATES)


@pytest.mark.parametrize("feed", [False, True])
def test_history_written_unpartitioned_is_partitioned_once(engine, new_lake, feed):
    """A history table an earlier cdc-sql wrote unpartitioned gets its partition at the next
    run's layout, in one commit the hand-change check lets pass, its versions unchanged, and
    windows merge on exactly; with a change data feed (where the rewrite would show as every
    version deleted and inserted) it stays as it is."""
    from deltalake import DeltaTable

    from cdc_sql.lake.silver.merge import lay_out, partition_history
    from cdc_sql.lake.silver.ownership import check_untouched

    lake, plan = history_of_two_updates(new_lake)
    merge_window(lake, plan, Window(boundary(-1), boundary(0)))
    history = lake.history_path("t")
    lake.tables.reshape(history, {}, [], partitions=[])  # as an earlier cdc-sql wrote it
    recorded = as_recorded(lake)
    before = engine.read(history).orderBy("id", "_cdc_valid_from").collect()
    if feed:  # the rule alone (Sail writes no change data feed)
        partition_history(lake, plan_silver(Table(name="t", source="db.t", history=True,
                                                  change_data_feed=True), [TABLE], "p.yaml", 0),
                          lake.tables.layout(history))
    else:
        lay_out(lake, plan)
    assert DeltaTable(history).metadata().partition_columns == ([] if feed else ["_cdc_current"])
    assert engine.read(history).orderBy("id", "_cdc_valid_from").collect() == before
    check_untouched(lake, plan.spec, recorded)
    merge_window(lake, plan, Window(boundary(0), boundary(1)), recorded=recorded)
    assert_history(lake, TWO_UPDATES)


def test_history_started_again_is_not_taken_for_the_one_state_recorded(engine, new_lake):
    """History removed (to start it again from silver) and the next window's first attempt
    killed after its MERGE into the new table: the replay, state still naming the old table
    and a version the new one has reached, matches every version (the tables' ids differ)."""
    import shutil

    lake, plan = history_of_two_updates(new_lake)
    history = lake.history_path("t")
    for days in (30, 31):  # the old table's version past what the new one reaches
        lake.tables.set_properties(history, {"delta.logRetentionDuration": f"interval {days} days"})
    recorded = as_recorded(lake)
    shutil.rmtree(history)
    for _ in range(2):  # the first attempt, then its replay
        merge_window(lake, plan, Window(boundary(-1), boundary(1)), recorded=recorded)
        assert lake.tables.version(history) <= recorded.history_version
    assert_history(lake, TWO_UPDATES)
