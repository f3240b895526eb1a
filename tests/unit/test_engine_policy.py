"""When the engine starts (run/engine_policy.py)."""
from types import SimpleNamespace

import pytest

from cdc_sql.run import engine_policy
from cdc_sql.run.engine_policy import early_for_capture
from cdc_sql.source.offsets import Position


def test_a_capture_pass_with_nothing_to_read_starts_no_engine():
    here = Position("binlog.000002", 4180)
    assert not early_for_capture(True, here, Position("binlog.000002", 4180))
    assert early_for_capture(True, here, Position("binlog.000002", 4181))
    assert early_for_capture(True, here, Position("binlog.000003", 4))
    assert early_for_capture(True, here, Position("binlog.000002", 4180, base=1))  # another server
    assert not early_for_capture(False, here, Position("binlog.000003", 4))


@pytest.mark.parametrize("local", [True, False], ids=["local", "object-store"])
@pytest.mark.parametrize("schema", ["", "cdc"])
@pytest.mark.parametrize("always, by_size", [(False, False), (True, False), (False, True)])
def test_the_engine_starts_early_and_bounds_passes_where_it_merges(monkeypatch, schema, local,
                                                                      always, by_size):
    """A catalog schema or a table whose windows the engine merges starts it early, on a local
    path or in an object store alike (silver's first version is written here there too); a
    pass is bounded by engine.window_bytes wherever the engine may merge a window of any size
    (all of a table's, or a plain table's past the memory budget); the plans' routes walked
    once."""
    walks = []
    monkeypatch.setattr(engine_policy.route, "engine_use", lambda lake, plans: walks.append(
        plans) or engine_policy.route.EngineUse(always, by_size, frozenset({"here"})))
    pipeline = SimpleNamespace(target=SimpleNamespace(schema=schema),
                               engine=SimpleNamespace(window_bytes=4096))
    policy = engine_policy.decide(pipeline, SimpleNamespace(local=local), ["plan"])
    assert policy == (bool(schema) or always, 4096 if always or by_size else 0,
                      frozenset({"here"}))
    assert walks == [["plan"]]


def _plan(key_type: str = "bigint", change_data_feed: bool = False, history: bool = False,
          before_key: int = 0, table_properties: dict | None = None):
    """A plan of shop.orders: `before_key` INT columns, then its key `id`, then `amount`."""
    from cdc_sql.config.model import Table
    from cdc_sql.lake.silver.plan import plan_silver
    from cdc_sql.source.schema import Column, SourceTable

    columns = [Column(f"c{n}", "int", "int", 10, 0, None, None) for n in range(before_key)]
    columns += [Column("id", key_type, key_type, 19, 0, None, None),
                Column("amount", "int", "int", 10, 0, None, None)]
    source = SourceTable("shop", "orders", tuple(columns), ("id",))
    spec = Table(name="orders", source="shop.orders", change_data_feed=change_data_feed,
                 history=history, table_properties=table_properties or {})
    return plan_silver(spec, [source], "p.yaml", 0)


@pytest.mark.parametrize("where", ["local", "s3://bucket/lake"])
def test_passes_are_bounded_where_a_window_of_any_size_may_reach_the_engine(tmp_path, where):
    """A plain table's window past the memory budget is merged here in key ranges of an
    integer first key column, on a local path or in an object store alike: no bound. A table
    with a change data feed (a rewrite of files writes none), or keyed by text, sends such a
    window through the engine, whose memory follows it: passes are cut at
    engine.window_bytes, as for a table whose windows all go through the engine."""
    from cdc_sql.lake.lake import Lake
    from cdc_sql.lake.silver import route

    lake = Lake(None, str(tmp_path) if where == "local" else where, None)
    plain = _plan()
    assert route.engine_use(lake, [plain])[:2] == (False, False)
    assert route.engine_use(lake, [plain, _plan(change_data_feed=True)])[:2] == (False, True)
    assert route.engine_use(lake, [_plan("varchar")])[:2] == (False, True)
    assert route.engine_use(lake, [plain, _plan(history=True)])[:2] == (True, False)
    pipeline = SimpleNamespace(target=SimpleNamespace(schema=""),
                               engine=SimpleNamespace(window_bytes=4096))
    assert engine_policy.decide(pipeline, lake, [plain])[:2] == (False, 0)
    assert engine_policy.decide(pipeline, lake, [_plan(change_data_feed=True)])[:2] == \
        (False, 4096)


def test_the_tables_merged_here_are_those_whose_route_says_so(tmp_path):
    """The merge phase's light lane (run/merge_phase.py) takes only tables whose windows may
    be merged in this process: a table with history goes through the engine."""
    from cdc_sql.lake.lake import Lake
    from cdc_sql.lake.silver import route
    from dataclasses import replace

    lake = Lake(None, str(tmp_path), None)
    plain = _plan()
    kept = replace(_plan(history=True), spec=replace(plain.spec, name="kept", history=True))
    assert route.engine_use(lake, [plain, kept]).here == frozenset({"orders"})


def test_passes_are_bounded_where_the_first_key_column_has_no_file_statistics(tmp_path):
    """Key ranges come from file statistics: a first key column past the 32 columns that keep
    them (cdc-sql's own columns first), or in a table asking for fewer
    (delta.dataSkippingNumIndexedCols), has none in silver or bronze, so such a window past
    the budget goes through the engine: passes are cut."""
    from cdc_sql.lake.lake import Lake
    from cdc_sql.lake.silver import route

    lake = Lake(None, str(tmp_path), None)
    assert route.engine_use(lake, [_plan(before_key=20)])[:2] == (False, False)
    assert route.engine_use(lake, [_plan(before_key=40)])[:2] == (False, True)
    assert route.engine_use(lake, [_plan(table_properties={
        "delta.dataSkippingNumIndexedCols": "1"})])[:2] == (False, False)  # `id` is the first
    assert route.engine_use(lake, [_plan(before_key=1, table_properties={
        "delta.dataSkippingNumIndexedCols": "1"})])[:2] == (False, True)


def test_a_light_merge_is_of_a_small_silver_and_small_bronze():
    """Light merges (run/merge_phase.py) take a lane of their own: silver's files and bronze's
    changes of at most LIGHT_BYTES each."""
    from cdc_sql.run.merge_phase import LIGHT_BYTES, light

    assert light(0, 0) and light(LIGHT_BYTES, LIGHT_BYTES)
    assert not light(LIGHT_BYTES + 1, 0) and not light(0, LIGHT_BYTES + 1)
