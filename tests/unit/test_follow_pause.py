"""A run following the source pauses `poll_seconds` between passes only when the source's end
has not moved since the last pass read to it: a busy source is followed without a pause."""
import threading

from cdc_sql.run.runner import Runner
from cdc_sql.source.offsets import Position
from cdc_sql.source.preflight import SourceView


def follower(ends: list[int], stop_during_wait: bool = False):
    """A Runner whose source's end is `ends` one read after another, and the waits it made."""
    runner, waits = Runner.__new__(Runner), []
    runner.stop = threading.Event()
    reads = iter(ends)

    def refresh(view):
        view.end = Position("binlog.000001", next(reads))
        return view

    def wait(seconds):
        waits.append(seconds)
        if stop_during_wait:
            runner.stop.set()
        return runner.stop.is_set()

    runner._refresh_end = refresh
    runner.stop.wait = wait
    return runner, waits


def view_at(pos: int) -> SourceView:
    return SourceView(mariadb=True, tables=[], end=Position("binlog.000001", pos),
                      first_binlog=Position("binlog.000001", 4))


def test_a_moved_end_is_read_to_at_once():
    runner, waits = follower([200])
    view = runner._next_end(view_at(100), 1.0)
    assert view.end.pos == 200 and waits == []


def test_an_end_that_stood_still_is_read_again_after_the_pause():
    runner, waits = follower([100, 300])
    view = runner._next_end(view_at(100), 1.0)
    assert view.end.pos == 300 and waits == [1.0]


def test_a_stop_asked_during_the_pause_ends_the_run():
    runner, waits = follower([100], stop_during_wait=True)
    assert runner._next_end(view_at(100), 2.5) is None and waits == [2.5]
