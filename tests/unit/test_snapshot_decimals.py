"""DECIMALs of up to 18 digits are read by connectorx as their unscaled integers and made
decimals in Arrow without text (source/snapshot.py: `unscaled`, `from_unscaled`)."""
from decimal import Decimal

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from cdc_sql.source.schema import Column
from cdc_sql.source.snapshot import _select_item, from_unscaled, unscaled


@st.composite
def decimals(draw):
    """A DECIMAL(p, s) type of at most 18 digits and unscaled values it holds (None: NULL)."""
    precision = draw(st.integers(1, 18))
    scale = draw(st.integers(0, precision))
    bound = 10**precision - 1
    values = draw(st.lists(st.one_of(st.none(), st.integers(-bound, bound)), max_size=30))
    return precision, scale, values


@given(decimals(), st.integers(0, 3))
def test_unscaled_integers_become_the_exact_decimals(case, offset):
    precision, scale, values = case
    ints = pa.array([0] * offset + values, pa.int64()).slice(offset)  # a slice, as batches are
    made = from_unscaled(ints, pa.decimal128(precision, scale))
    assert made.type == pa.decimal128(precision, scale)
    assert made.to_pylist() == [None if v is None else Decimal(v).scaleb(-scale)
                                for v in values]


def column(data_type: str, precision: int | None, scale: int | None, unsigned=False) -> Column:
    kind = f"{data_type}({precision},{scale})" if precision else data_type
    return Column("m", data_type, kind + (" unsigned" if unsigned else ""), precision, scale,
                  None, None)


def test_which_columns_are_read_unscaled_and_how():
    assert unscaled(column("decimal", 18, 2)) and unscaled(column("decimal", 18, 0, True))
    assert not unscaled(column("decimal", 19, 2)) and not unscaled(column("bigint", None, None))
    # exact arithmetic: an integer literal (1e2 would be a DOUBLE)
    assert _select_item(column("decimal", 12, 2)) == "CAST(`m` * 100 AS SIGNED) AS `m`"
    assert _select_item(column("decimal", 5, 0)) == "CAST(`m` * 1 AS SIGNED) AS `m`"
    assert _select_item(column("decimal", 30, 10)) == "CAST(`m` AS CHAR) AS `m`"
