"""Property: history on chosen columns (`history: {track: [...]}` / `{except: [...]}`) equals
the changes applied one by one, whatever the batch bounds, replays and crashes.

The histories, splits, reads and crashes of test_merge_rules.py, over a projection that adds
a column `g` from `v` (`ab` for a and b, else `cd`): history tracks `g` (or every column but
`v`), so a change a -> b updates the current version in place and a -> c starts a new one. The
model applies the changes one by one (test_merge_rules.versions with `same`); the SQL under
test is the real one on the engine (history goes through the engine's SQL on every route).
"""
from __future__ import annotations

import pytest
from chispa import assert_df_equality
from hypothesis import HealthCheck, given, settings, strategies as st

from cdc_sql.config.model import History, Table
from cdc_sql.lake import bronze
from cdc_sql.lake.silver.merge import merge_window
from cdc_sql.lake.silver.plan import plan_silver
from cdc_sql.source.binlog_rows import CapturedStatement
from cdc_sql.source.offsets import Offset
from cdc_sql.window import SplitRef, Window
from tests.property import test_merge_rules
from tests.property.test_merge_rules import (TABLE, TS, assert_silver, boundary, check_batches,
                                             histories, land_changes, binlog_rows, split_rows,
                                             offset, land_resnapshot, states)

new_lake = test_merge_rules.new_lake  # the fixture: a fresh lake per hypothesis example
PROJECTION = "SELECT id, v, CASE WHEN v IN ('a', 'b') THEN 'ab' ELSE 'cd' END AS g FROM t"
CHOICES = {"track": History(track=["g"]), "except": History(except_=["V"])}


def group(value: str) -> str:
    return "ab" if value in ("a", "b") else "cd"


def same(old: str, new: str) -> bool:
    return group(old) == group(new)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), history=histories())
def test_history_on_chosen_columns_equals_changes_applied_one_by_one(engine, new_lake, data,
                                                                     history):
    lake = new_lake()
    chosen = CHOICES[data.draw(st.sampled_from(sorted(CHOICES)))]
    check_batches(lake, data, history, PROJECTION, chosen, same)
    assert_held(lake)


def assert_held(lake) -> None:
    """Each version holds a change inside its own span; the current ones hold silver's."""
    engine = lake.engine
    history = engine.read(lake.history_path("t"))
    assert history.where("_cdc_offset < _cdc_valid_from OR _cdc_offset >= _cdc_valid_to "
                         "OR _cdc_offset IS NULL").count() == 0
    held = history.where("_cdc_current").select("id", "v", "g", "_cdc_offset", "_cdc_ts")
    silver = engine.read(lake.silver_path("t")).select("id", "v", "g", "_cdc_offset", "_cdc_ts")
    assert_df_equality(held.orderBy("id"), silver.orderBy("id"), ignore_nullable=True)


def test_changes_in_one_window_give_the_versions_of_one_by_one(engine, new_lake):
    """One key, one window: a -> b (in place), -> c (a new version), -> d (in place), deleted,
    inserted as c (a new version), -> d (in place); as separate windows, replayed, the same."""
    txns = [[("u", 1, 1, "b"), ("u", 1, 1, "c")], [("u", 1, 1, "d")], [("d", 1, 1, "d")],
            [("c", 1, 1, "c")], [("u", 1, 1, "d")]]
    want = [(1, "b", boundary(-1), offset(0, 1)), (1, "d", offset(0, 1), offset(2, 0)),
            (1, "d", offset(3, 0), None), (2, "s2", boundary(-1), None)]
    for cuts in ([4], [0, 1, 2, 3, 4], [1, 4]):
        lake = new_lake()
        bronze.ensure_snapshot_table(lake, TABLE)
        bronze.write_splits(lake, TABLE, [split_rows([1, 2], ["a", "s2"])], "a1", boundary(-1),
                            TS)
        bronze.ensure_statements_table(lake)
        land_changes(lake, binlog_rows(txns, -1))
        plan = plan_silver(Table(name="t", source="db.t", projection=PROJECTION,
                                 history=CHOICES["track"]), [TABLE], "p.yaml", 0)
        splits = {"db.t": (SplitRef(0, "a1", boundary(-1)),)}
        merge_window(lake, plan, Window("", boundary(-1), splits,
                                        first=True, history_start=boundary(-1)))
        applied = boundary(-1)
        for u in cuts:
            recorded = test_merge_rules.as_recorded(lake)  # as state records it
            for _ in range(2):  # replayed: nothing changes
                merge_window(lake, plan, Window(applied, boundary(u)), recorded=recorded)
            applied = boundary(u)
        test_merge_rules.assert_history(lake, want)
        assert_held(lake)


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), history=histories())
def test_a_resnapshot_updates_in_place_or_starts_versions(engine, new_lake, data, history):
    """A re-snapshot over any silver and history: current versions equal silver after it (and
    after its replay); a key whose row kept its tracked columns keeps its version's start."""
    initial, txns = history
    model = states(initial, txns)
    last = len(txns) - 1
    lake = new_lake()
    before = Offset(0, 5, 0).text
    old = data.draw(st.dictionaries(st.integers(1, 8), st.sampled_from(["a", "c", "x"])))
    bronze.ensure_snapshot_table(lake, TABLE)
    bronze.write_splits(lake, TABLE, [split_rows(sorted(old), [old[k] for k in sorted(old)])],
                        "old", before, TS)
    bronze.ensure_statements_table(lake)
    bronze.ensure_changes_table(lake, TABLE)
    plan = plan_silver(Table(name="t", source="db.t", projection=PROJECTION,
                             history=CHOICES["track"]), [TABLE], "p.yaml", 0)
    merge_window(lake, plan, Window("", before, {"db.t": (SplitRef(0, "old", before),)}, first=True,
                                    history_start=before))
    window, *_ = land_resnapshot(lake, data, model, txns, last)
    for _ in range(1 + data.draw(st.integers(0, 1))):  # a replay: killed before state had it
        merge_window(lake, plan, window)
        assert_silver(lake, model[last])
        assert_held(lake)
    history = lake.engine.read(lake.history_path("t"))
    kept = {r.id for r in history.where(f"_cdc_current AND _cdc_valid_from = '{before}'")
            .collect()}
    assert kept == {k for k, v in old.items() if k in model[last] and same(v, model[last][k])}


@pytest.mark.parametrize("history", ["track", "every column"])
def test_a_truncate_ends_versions_between_changes_of_one_window(engine, new_lake, history):
    """An update, a TRUNCATE, the key inserted again with the same tracked value, in one
    window: the first version ends at the TRUNCATE and the insert starts its own (one batch
    would have updated the first in place, then ended it with the truncate; with every column
    tracked, ended it at the insert)."""
    lake = new_lake()
    bronze.ensure_snapshot_table(lake, TABLE)
    bronze.write_splits(lake, TABLE, [split_rows([1, 2], ["a", "c"])], "a1", boundary(-1), TS)
    bronze.ensure_statements_table(lake)
    land_changes(lake, binlog_rows([[("u", 1, 1, "b")], [("c", 1, 1, "a")]], -1))
    truncated = Offset(1, 1050, 0).text  # between the two transactions
    bronze.append_statements(lake, [CapturedStatement(truncated, "db", "t", "truncate",
                                                      "TRUNCATE t", TS, "0-1-1")])
    plan = plan_silver(Table(name="t", source="db.t", projection=PROJECTION,
                             history=CHOICES.get(history, True)), [TABLE], "p.yaml", 0)
    splits = {"db.t": (SplitRef(0, "a1", boundary(-1)),)}
    merge_window(lake, plan, Window("", boundary(-1), splits, first=True,
                                    history_start=boundary(-1)))
    # tracked: "a" and "b" are one group, so the update continues the snapshot's version
    first = ([(1, "b", boundary(-1), truncated)] if history == "track" else
             [(1, "a", boundary(-1), offset(0, 0)), (1, "b", offset(0, 0), truncated)])
    recorded = test_merge_rules.as_recorded(lake)  # as state records it
    for _ in range(2):  # replayed: the same
        merge_window(lake, plan, Window(boundary(-1), boundary(1)), recorded=recorded)
        assert_silver(lake, {1: "a"})
        test_merge_rules.assert_history(lake, [*first, (1, "a", offset(1, 0), None),
                                               (2, "c", boundary(-1), truncated)])
