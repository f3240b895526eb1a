"""merge_phase.Seen: which source tables a run's capture passes wrote past a table's applied
offset (so that tables untouched since advance without a MERGE)."""
from hypothesis import given
from hypothesis import strategies as st

from cdc_sql.run.merge_phase import Seen
from cdc_sql.source.offsets import Offset

TABLES = ["db.a", "db.b", "db.c"]


def text(position: int) -> str:
    return Offset(1, position, 0).text


@st.composite
def passes(draw):
    """Contiguous passes (each begins where the one before ended), each with the offsets of
    the changes it wrote, by table; and where the last one ended."""
    bounds = sorted(draw(st.sets(st.integers(4, 10_000), min_size=2, max_size=6)))
    changes = [[(draw(st.integers(low + 1, high)), draw(st.sampled_from(TABLES)))
                for _ in range(draw(st.integers(0, 4)))]
               for low, high in zip(bounds, bounds[1:])]
    return bounds, changes


@given(passes(), st.integers(0, 10_001))
def test_every_change_past_applied_is_seen_and_passes_wholly_before_it_are_not(found,
                                                                               applied):
    bounds, changes = found
    seen = Seen()
    for start, wrote in zip(bounds, changes):
        seen = seen.after(text(start), frozenset(t for _, t in wrote), last=True)
    since = seen.changed_since(text(applied))
    for wrote in changes:
        for at, table in wrote:
            if at > applied:  # a change past `applied` is never missed
                assert table in since
    ongoing = [*zip(bounds[1:-1], changes[:-1]), (None, changes[-1])]  # the last goes on
    assert since <= {t for end, wrote in ongoing if end is None or end > applied
                     for _, t in wrote}  # a pass that ended by `applied` adds nothing
    assert seen.captured_from == text(bounds[0])
    assert seen.changed_since(text(applied)) is since  # worked out once


def test_a_pass_that_read_nothing_adds_nothing_and_the_last_says_whether_capture_goes_on():
    seen = Seen().after(text(10), frozenset({"db.a"}), last=False)
    assert not seen.last
    seen = seen.after(None, frozenset(), last=True)
    assert seen.last and seen.passes == ((text(10), frozenset({"db.a"})),)
    assert Seen().captured_from is None and Seen().changed_since(text(5)) == frozenset()
