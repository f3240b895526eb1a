import pytest
from hypothesis import given, strategies as st

from cdc_sql.source.offsets import Offset, Position, file_sequence

offsets = st.builds(Offset, st.integers(0, 999_999), st.integers(0, 10**12 - 1),
                    st.integers(0, 999_999))


@given(offsets, offsets)
def test_text_order_is_offset_order(a, b):
    assert (a < b) == (a.text < b.text)
    assert Offset.parse(a.text) == a


def test_positions_order_across_files():
    assert Position("binlog.000009", 999_999).offset < Position("binlog.000010", 4).offset
    assert Position.parse("binlog.000010:4") == Position("binlog.000010", 4)
    assert file_sequence("mysql-bin.000042") == 42


def test_out_of_range_rejected():
    with pytest.raises(ValueError):
        Offset(1, 10**12)
