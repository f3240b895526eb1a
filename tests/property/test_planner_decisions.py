"""The run's small decisions (planner.py), as pure functions of the checkpoint and of what this
run captured: whether a table is caught up, whether it is idle, where capture starts."""
from hypothesis import given, strategies as st

from cdc_sql.lake.state import CaptureEntry, SplitEntry, TableEntry
from cdc_sql.planner import caught_up, idle, lowest_watermark
from cdc_sql.source.offsets import Offset

TABLES = ("db.a", "db.b", "db.c")


def at(n: int) -> str:
    return Offset(1, n, 0).text


@given(applied=st.integers(0, 50), captured=st.one_of(st.none(), st.integers(0, 50)),
       merged=st.booleans(), resnapshot=st.booleans(), known=st.booleans())
def test_a_table_is_caught_up_only_when_nothing_waits(applied, captured, merged, resnapshot,
                                                      known):
    entry = TableEntry(table="t", applied=at(applied), snapshot_merged=merged,
                       resnapshot=at(1) if resnapshot else "") if known else None
    capture = None if captured is None else CaptureEntry(position=f"binlog.000001:{captured}")
    found = caught_up(entry, capture)
    expected = known and merged and not resnapshot and captured is not None and \
        applied >= captured
    assert found == (at(applied) if expected else None)


@given(captured_from=st.one_of(st.none(), st.integers(0, 50)), applied=st.integers(0, 50),
       reads=st.sets(st.sampled_from(TABLES), min_size=1),
       changed=st.sets(st.sampled_from(TABLES)), tables_exist=st.booleans())
def test_a_table_is_idle_only_when_this_run_saw_its_whole_window_untouched(
        captured_from, applied, reads, changed, tables_exist):
    result = idle(None if captured_from is None else at(captured_from), at(applied), reads,
                  changed, tables_exist)
    if result:  # then capture saw all of (applied, now], none of it for this table
        assert captured_from is not None and captured_from <= applied
        assert not reads & changed and tables_exist
    else:
        assert captured_from is None or captured_from > applied or reads & changed or \
            not tables_exist


@given(st.lists(st.tuples(st.integers(1, 3), st.integers(4, 10**6), st.booleans()),
                max_size=8))
def test_capture_starts_at_the_lowest_watermark_of_the_done_splits(marks):
    splits = [SplitEntry("db.t", i, status="done" if done else "planned",
                         watermark_position=f"binlog.{file:06d}:{pos}")
              for i, (file, pos, done) in enumerate(marks)]
    found = lowest_watermark(splits)
    done = [(file, pos) for file, pos, is_done in marks if is_done]
    if not done:
        assert found is None
    else:
        assert (int(found.file.rsplit(".", 1)[1]), found.pos) == min(done)
