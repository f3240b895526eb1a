"""Property: soft deletes and skipped operations (lake/semantics.py) against a model.

The same random histories, splits at random watermarks, batch bounds and replays as
test_merge_rules.py, through the real SQL on the engine and through the in-process delta-rs
merge. The model: for each key, its last candidate after its split's watermark. With `deletes:
soft`, a key deleted after that watermark and absent at the bound is its last delete's image,
flagged deleted; with `skip: [delete]`, a key keeps its last image that was not a delete.
"""
from __future__ import annotations

import pytest
from chispa import assert_df_equality
from hypothesis import HealthCheck, given, settings, strategies as st

from cdc_sql.config.model import Table
from cdc_sql.lake import bronze, semantics
from cdc_sql.lake.silver.merge import merge_window
from cdc_sql.lake.silver.plan import plan_silver
from cdc_sql.source.offsets import Offset
from cdc_sql.window import SplitRef, Window
from tests.property import test_merge_rules
from tests.property.test_merge_rules import (TABLE, TS, binlog_rows, boundary, drawn_splits,
                                             histories, in_process_merges, land_changes,
                                             land_resnapshot, offset, split_rows, states)

new_lake = test_merge_rules.new_lake  # the fixture: a fresh lake per hypothesis example
SEMANTICS = {"soft": {"deletes": "soft"}, "skip": {"skip": ["delete"]}}


def events(txns):
    """(offset, txn, key, op, value) of every binlog row, a key change as a delete and an insert."""
    for i, txn in enumerate(txns):
        for j, (op, key, new, value) in enumerate(txn):
            if op == "k":
                yield offset(i, j), i, key, "d", value
                yield offset(i, j), i, new, "c", value
            else:
                yield offset(i, j), i, key, op, value


def expected(kind: str, initial, txns, bounds, marks, reads, upto: int,
             start: int | None = None) -> dict:
    """key -> (value, deleted) silver must hold after transaction `upto`: the last captured
    image of the key (its snapshot row at its split's watermark, or a binlog change captured
    after transaction `start`, by default the lowest watermark), a delete's image flagged
    (soft) or no image at all (skip)."""
    model = states(initial, txns)
    start = min(marks) if start is None else start
    out = {}
    for (lo, hi), mark, read in zip(bounds, marks, reads):
        for key in range(lo, hi):
            images = [(boundary(mark), model[read][key], False)] if key in model[read] else []
            images += [(at, value, op == "d") for at, i, k, op, value in events(txns)
                       if k == key and start < i <= upto]
            if kind == "skip":
                images = [image for image in images if not image[2]]
            if images:
                _, value, deleted = max(images)
                out[key] = (value, deleted)
    return out


def assert_silver(lake, kind: str, want: dict) -> None:
    engine = lake.engine
    silver = engine.read(lake.silver_path("t"))
    if kind == "soft":
        got = silver.select("id", "v", semantics.DELETED).orderBy("id")
        rows = sorted((k, v, d) for k, (v, d) in want.items())
    else:
        assert semantics.DELETED not in silver.columns
        got = silver.select("id", "v").orderBy("id")
        rows = sorted((k, v) for k, (v, _) in want.items())
    assert_df_equality(got, engine.spark.createDataFrame(rows, got.schema).orderBy("id"),
                       ignore_nullable=True)
    if kind == "soft":  # a soft-deleted row stands at its delete's offset
        for row in silver.where(semantics.DELETED).collect():
            assert row["_cdc_op"] == "d"


def land(lake, model, txns, bounds, marks, reads):
    bronze.ensure_snapshot_table(lake, TABLE)
    for split_id, ((lo, hi), mark, read) in enumerate(zip(bounds, marks, reads)):
        rows = sorted((k, v) for k, v in model[read].items() if lo <= k < hi)
        bronze.write_splits(lake, TABLE, [split_rows([k for k, _ in rows], [v for _, v in rows],
                                                     split_id)], "a1", boundary(mark), TS)
    bronze.ensure_statements_table(lake)
    land_changes(lake, binlog_rows(txns, min(marks)))


@pytest.mark.parametrize("way", ["delta-rs", "files"])
@pytest.mark.parametrize("kind", sorted(SEMANTICS))
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), history=histories())
def test_silver_equals_the_model_on_both_merge_paths(engine, new_lake, monkeypatch, kind, way,
                                                     data, history):
    """Engine MERGE (first version by the engine's append) and in process (first version by
    delta-rs; changes MERGEd by delta-rs, or by rewriting files as wide rows are), replays
    included, each equal to the model after every batch."""
    from cdc_sql.lake import small_merge

    in_process_merges(monkeypatch, way)
    initial, txns = history
    model = states(initial, txns)
    last = len(txns) - 1
    bounds, marks = drawn_splits(data, last)
    reads = [data.draw(st.integers(mark, last)) for mark in marks]
    plan = plan_silver(Table(name="t", source="db.t", **SEMANTICS[kind]), [TABLE], "p.yaml", 0)
    done = {"db.t": tuple(SplitRef(i, "a1", boundary(mark)) for i, mark in enumerate(marks))}
    lakes = [new_lake(), new_lake()]  # in this process, by the engine
    for lake in lakes:
        land(lake, model, txns, bounds, marks, reads)

    def merge(n, window):
        if n == 0:
            return merge_window(lakes[0], plan, window)
        with monkeypatch.context() as patch:
            patch.setattr(small_merge, "merged", lambda *_: False)
            merge_window(lakes[1], plan, window)

    applied = ""
    for u in sorted({data.draw(st.integers(max(reads), last)), last}):
        window = Window(applied, boundary(u)) if applied else \
            Window("", boundary(u), done, first=True)
        for n in (0, 1):
            for _ in range(1 + data.draw(st.integers(0, 1))):  # sometimes replayed
                merge(n, window)
            assert_silver(lakes[n], kind, expected(kind, initial, txns, bounds, marks, reads, u))
        applied = boundary(u)


@pytest.mark.parametrize("kind", sorted(SEMANTICS))
def test_a_soft_deleted_row_is_revived_and_history_is_unchanged(engine, new_lake, kind):
    """A delete, then an insert of the same key: soft-deleted, then live again; history ends
    the version at the delete either way (soft), or never (skipped)."""
    lake = new_lake()
    txns = [[("d", 1, 1, "s1")], [("c", 1, 1, "back")], [("d", 2, 2, "s2")]]
    land(lake, {-1: {1: "s1", 2: "s2"}}, [], [(1, 3)], [-1], [-1])
    land_changes(lake, binlog_rows(txns, -1))
    plan = plan_silver(Table(name="t", source="db.t", history=True, **SEMANTICS[kind]), [TABLE],
                       "p.yaml", 0)
    first = Window("", boundary(-1), {"db.t": (SplitRef(0, "a1", boundary(-1)),)}, first=True,
                   history_start=boundary(-1))
    merge_window(lake, plan, first)
    merge_window(lake, plan, Window(boundary(-1), boundary(0)))
    silver = lake.engine.read(lake.silver_path("t"))
    if kind == "soft":
        row = silver.where("id = 1").collect()[0]
        assert (row["v"], row["_cdc_deleted"], row["_cdc_offset"]) == ("s1", True, offset(0, 0))
    else:
        assert silver.where("id = 1").collect()[0]["v"] == "s1"
    merge_window(lake, plan, Window(boundary(0), boundary(2)))
    want = {1: ("back", False), 2: ("s2", kind == "soft")}
    assert_silver(lake, kind, want)
    history = lake.engine.read(lake.history_path("t"))
    got = sorted((r["id"], r["v"], r["_cdc_valid_to"]) for r in history.collect())
    if kind == "soft":  # as with hard deletes
        assert got == sorted([(1, "s1", offset(0, 0)), (1, "back", None),
                              (2, "s2", offset(2, 0))])
    else:
        assert got == sorted([(1, "s1", offset(1, 0)), (1, "back", None), (2, "s2", None)])


@pytest.mark.parametrize("kind", sorted(SEMANTICS))
@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), history=histories())
def test_a_resnapshot_keeps_what_the_semantics_keep(engine, new_lake, kind, data, history):
    """A re-snapshot replaces silver with the source's rows; the old rows it no longer finds
    stay (skipped deletes) or stay flagged deleted (soft), replays included."""
    initial, txns = history
    model = states(initial, txns)
    last = len(txns) - 1
    lake = new_lake()
    before = Offset(0, 5, 0).text
    old = data.draw(st.dictionaries(st.integers(1, 8), st.sampled_from(["a", "x", "y"])))
    bronze.ensure_snapshot_table(lake, TABLE)
    bronze.write_splits(lake, TABLE, [split_rows(sorted(old), [old[k] for k in sorted(old)])],
                        "old", before, TS)
    bronze.ensure_statements_table(lake)
    bronze.ensure_changes_table(lake, TABLE)
    plan = plan_silver(Table(name="t", source="db.t", **SEMANTICS[kind]), [TABLE], "p.yaml", 0)
    merge_window(lake, plan, Window("", before, {"db.t": (SplitRef(0, "old", before),)}, first=True))
    window, start, bounds, marks, reads = land_resnapshot(lake, data, model, txns, last)
    want = expected(kind, initial, txns, bounds, marks, reads, last, start)
    for key, value in old.items():  # old rows the re-snapshot does not find
        if key not in want:
            want[key] = (value, kind == "soft")
    for _ in range(1 + data.draw(st.integers(0, 1))):  # a replay: killed before state had it
        merge_window(lake, plan, window)
        assert_silver(lake, kind, want)
