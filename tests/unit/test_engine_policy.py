"""When the engine starts (run/engine_policy.py)."""
from dataclasses import replace
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


@pytest.mark.parametrize("schema", ["", "cdc"])
@pytest.mark.parametrize("wanted", [False, True])
def test_the_engine_starts_early_and_bounds_passes_where_it_merges(monkeypatch, schema,
                                                                      wanted):
    """A catalog schema or a table whose windows the engine merges starts it early; only the
    latter bounds a capture pass by engine.window_bytes; the plans' routes walked once."""
    walks = []
    monkeypatch.setattr(engine_policy.route, "engine_wanted",
                        lambda lake, plans: walks.append(plans) or wanted)
    pipeline = SimpleNamespace(target=SimpleNamespace(schema=schema),
                               engine=SimpleNamespace(window_bytes=4096))
    policy = engine_policy.decide(pipeline, object(), ["plan"])
    assert policy == (bool(schema) or wanted, 4096 if wanted else 0)
    assert walks == [["plan"]]


def test_an_object_store_lake_bounds_passes_of_plain_tables_too(tmp_path):
    """On a local path a plain table's window past the memory budget is rewritten here in key
    ranges, so its capture passes need no bound; in an object store that window goes through
    the engine (files are rewritten here only on a local path), whose memory follows it: the
    engine is wanted, and passes are cut at engine.window_bytes."""
    from cdc_sql.lake.lake import Lake
    from cdc_sql.lake.silver import route
    from cdc_sql.lake.small_merge import _rewritable
    from tests.unit.test_layout import _orders_plan

    plain = _orders_plan(())
    with_history = replace(plain, spec=replace(plain.spec, history=True))
    local, store = Lake(None, str(tmp_path), None), Lake(None, "s3://bucket/lake", None)
    assert not route.engine_wanted(local, [plain])
    assert route.engine_wanted(local, [plain, with_history])
    assert route.engine_wanted(store, [plain])
    assert not _rewritable(store, store.silver_path("orders"))
    pipeline = SimpleNamespace(target=SimpleNamespace(schema=""),
                               engine=SimpleNamespace(window_bytes=4096))
    assert engine_policy.decide(pipeline, store, [plain]) == (True, 4096)
    assert engine_policy.decide(pipeline, local, [plain]) == (False, 0)
