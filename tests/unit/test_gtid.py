import pytest

from cdc_sql.source.gtid import GtidSet, GtidWatermarks
from cdc_sql.source.offsets import Position

A = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
B = "4f22ab58-82db-22f2-af44-d91bb0530673"


def test_parse_and_membership():
    executed = GtidSet.parse(f"{A}:1-5:7,\n{B.upper()}:1-3")
    assert f"{A}:1" in executed and f"{A}:5" in executed and f"{A}:7" in executed
    assert f"{A}:6" not in executed and f"{A}:8" not in executed
    assert f"{B}:3" in executed and f"{B}:4" not in executed
    assert "00000000-0000-0000-0000-000000000000:1" not in executed
    assert f"{A}:1" not in GtidSet.parse("")


def test_malformed_set():
    with pytest.raises(ValueError):
        GtidSet.parse(A)


def test_resolution_is_the_first_transaction_outside_each_set():
    marks = GtidWatermarks({"s0": GtidSet.parse(f"{A}:1-3"), "s1": GtidSet.parse(f"{A}:1-5")})
    for n in range(1, 8):
        marks.observe(f"{A}:{n}", Position("binlog.000002", 100 * n))
    assert marks.resolved == {"s0": Position("binlog.000002", 400),
                              "s1": Position("binlog.000002", 600)}
    assert not marks.pending


def test_sets_covering_everything_read_resolve_at_the_end():
    marks = GtidWatermarks({"s0": GtidSet.parse(f"{A}:1-9")})
    marks.observe(f"{A}:1", Position("binlog.000001", 100))
    marks.finish(Position("binlog.000001", 900))
    assert marks.resolved == {"s0": Position("binlog.000001", 900)}
