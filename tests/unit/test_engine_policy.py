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
