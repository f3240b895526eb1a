"""When the engine starts (run/engine_policy.py)."""
from cdc_sql.run.engine_policy import early_for_capture
from cdc_sql.source.offsets import Position


def test_a_capture_pass_with_nothing_to_read_starts_no_engine():
    here = Position("binlog.000002", 4180)
    assert not early_for_capture(True, here, Position("binlog.000002", 4180))
    assert early_for_capture(True, here, Position("binlog.000002", 4181))
    assert early_for_capture(True, here, Position("binlog.000003", 4))
    assert early_for_capture(True, here, Position("binlog.000002", 4180, base=1))  # another server
    assert not early_for_capture(False, here, Position("binlog.000003", 4))
