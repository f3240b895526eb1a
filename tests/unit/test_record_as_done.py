"""run/commits.record_as_done: tasks' state entries recorded as they finish, grouped."""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from cdc_sql.run import commits
from cdc_sql.run.commits import record_as_done


class Recorder:
    """A State that keeps what each commit held."""

    def __init__(self):
        self.commits: list[list] = []

    def write(self, *entries) -> None:
        self.commits.append(list(entries))


class runner:  # noqa: N801 - what the tests call: a state and the function under test
    def __init__(self):
        self.state = Recorder()

    def _record_as_done(self, futures):
        return record_as_done(self.state, futures)


def test_every_entry_is_recorded_once_and_tasks_finishing_together_share_a_commit():
    r = runner()
    with ThreadPoolExecutor(4) as pool:
        recorded = r._record_as_done([pool.submit(lambda i=i: [i, -i]) for i in range(10_000)])
    assert sorted(recorded) == sorted([*range(10_000), *range(-9_999, 1)])
    assert sorted(e for commit in r.state.commits for e in commit) == sorted(recorded)
    assert len(r.state.commits) < 100  # not one a task


def test_the_first_finished_task_is_recorded_at_once_the_rest_within_a_second(monkeypatch):
    monkeypatch.setattr(commits, "STATE_COMMIT_SECONDS", 30.0)
    r, later = runner(), Future()
    first = Future()
    first.set_result(["first"])
    done = threading.Event()

    def wait_and_finish():
        done.wait()  # set once the first commit is there
        later.set_result(["later"])

    threading.Thread(target=wait_and_finish).start()
    original = r.state.write

    def write(*entries):
        original(*entries)
        done.set()

    r.state.write = write
    assert r._record_as_done([first, later]) == ["first", "later"]
    assert r.state.commits == [["first"], ["later"]]  # the last task: recorded when it ends


def test_a_failure_is_raised_after_the_others_are_recorded():
    r = runner()
    failed, ok = Future(), Future()
    failed.set_exception(RuntimeError("split 3"))
    ok.set_result(["kept"])
    with pytest.raises(RuntimeError, match="split 3"):
        r._record_as_done([failed, ok])
    assert r.state.commits == [["kept"]]
