"""When the binlog reader lands part of an open transaction (source/binlog.lands_part), when
a capture pass ends (capture.ended), and which tables state lists as landing after a batch
(capture.landing_after)."""
from hypothesis import given
from hypothesis import strategies as st

from cdc_sql.source.binlog import lands_part

PART = (100, 1_000)


def test_a_small_transaction_crossing_the_batch_size_is_not_cut():
    # 95 rows of earlier transactions held, 10 of this one: the batch closes at its end
    assert not lands_part((105, 500), (95, 450), PART)


def test_a_transaction_of_a_parts_rows_or_bytes_lands_in_parts():
    assert lands_part((150, 500), (50, 450), PART)    # its 100 rows
    assert lands_part((60, 1_200), (50, 150), PART)   # its 1,050 bytes
    assert lands_part((100, 10), (0, 0), PART)        # alone in the batch


def test_memory_stays_bounded_at_twice_a_part():
    assert lands_part((200, 10), (150, 5), PART) and lands_part((10, 2_000), (5, 1_500), PART)


@given(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 10**6),
       st.integers(0, 10**6))
def test_rules(before_rows, own_rows, before_bytes, own_bytes):
    held = (before_rows + own_rows, before_bytes + own_bytes)
    landed = lands_part(held, (before_rows, before_bytes), PART)
    if own_rows >= PART[0] or own_bytes >= PART[1]:
        assert landed  # a large transaction: memory follows the part, not its size
    if not landed:
        assert held[0] < 2 * PART[0] and held[1] < 2 * PART[1]  # never more than twice
    if held[0] < PART[0] and held[1] < PART[1]:
        assert not landed  # a batch not full yet is never cut


@given(st.integers(0, 10**9), st.integers(0, 10**5), st.integers(0, 10**9),
       st.integers(0, 10**5))
def test_a_pass_ends_once_it_landed_its_bound_and_never_without_one(landed, tables, size,
                                                                   count):
    """capture.ended: a pass ends at whichever of its bounds (bytes of row images, source
    tables changed) it reaches first; a bound of 0 never ends it."""
    from cdc_sql.capture import Bound, ended

    assert ended(landed, tables, Bound(size, count)) == \
        (0 < size <= landed or 0 < count <= tables)
    assert ended(landed, tables, Bound(size)) == (0 < size <= landed)
    assert ended(landed, tables, Bound(tables=count)) == (0 < count <= tables)
    assert not ended(landed, tables, Bound())


@given(st.sets(st.tuples(st.sampled_from("ab"), st.sampled_from("tuv"))), st.booleans(),
       st.booleans())
def test_tables_stay_listed_until_the_pass_ends_outside_a_transaction(landing, inside, last):
    """A run that dies looks for rows past the recorded position in every table listed: the
    listed tables may never shrink while rows could land past it."""
    from cdc_sql.capture import landing_after

    after = landing_after(landing, inside, last)
    assert after == (set() if last and not inside else landing)
    assert after is not landing  # the capture's own set is never shared with state's
