"""The load benchmark's search for the highest rate the follower keeps up with
(tests/bench/load.py `rates`): with a follower that keeps every rate up to some capacity, the
search never reports a rate it did not keep, and lands within a quarter of the capacity (or
of the writers' rate alone, the most it tries)."""
from hypothesis import given
from hypothesis import strategies as st

from tests.bench.load import rates


@given(st.floats(1_000, 1_000_000), st.floats(0, 2))
def test_the_search_keeps_the_highest_rate_within_a_quarter(alone, share):
    capacity, tried = alone * share, []

    def kept(rate: float) -> bool:
        tried.append(rate)
        return rate <= capacity

    best = rates(alone, kept)
    assert best <= capacity and best in [0.0, *tried]
    if capacity >= alone / 8:
        assert best >= 0.75 * min(capacity, alone) - 1e-6
    else:  # the first rate not kept: halved twice towards none
        assert tried[1:] == [alone / 16, alone / 32 if capacity < alone / 16 else alone * 3 / 32]
    assert len(tried) <= 6  # four doublings at most, two halvings
