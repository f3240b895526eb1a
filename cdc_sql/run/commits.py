"""State commits of parallel tasks, batched: whatever finishes together is recorded together."""
from __future__ import annotations

import queue
import time
from concurrent.futures import Future

from cdc_sql import faults
from cdc_sql.lake.state import State

# Tasks that finish within this many seconds of each other share one state commit. Waiting
# costs nothing: a crash loses only the record, and the work is done again (harmlessly).
STATE_COMMIT_SECONDS = 1.0


def record_as_done(state: State, futures: list[Future]) -> list:
    """Wait for tasks that return state entries; whatever finished together is recorded in
    one state commit (a thousand small tables do not make a thousand commits). Every task
    runs to its end; the first failure is raised after the others are recorded.

    Tasks report to a queue as they finish: waiting on the pending set instead takes locks on
    every pending future per finished one (docs/performance.md: 10,000 tables)."""
    finished: queue.SimpleQueue[Future] = queue.SimpleQueue()
    for future in futures:
        future.add_done_callback(finished.put)
    recorded, entries, failure, pending = [], [], None, len(futures)
    last_commit = 0.0  # the first task to finish is recorded at once
    while pending:
        done = _finished(finished, max(0.0, last_commit + STATE_COMMIT_SECONDS -
                                       time.monotonic()) if entries else None)
        pending -= len(done)
        for future in done:
            try:
                entries += future.result()
            except Exception as exc:  # noqa: BLE001 - raised below, once the rest is safe
                failure = failure or exc
        if entries and (not pending or
                        time.monotonic() >= last_commit + STATE_COMMIT_SECONDS):
            state.write(*entries)
            faults.point("state.committed")
            recorded += entries
            entries, last_commit = [], time.monotonic()
    if failure is not None:
        raise failure
    return recorded


def _finished(finished: queue.SimpleQueue, timeout: float | None) -> list[Future]:
    """The futures that finished: the next one within `timeout` (none if it passes), and every
    other one already there."""
    try:
        done = [finished.get(timeout=timeout)]
    except queue.Empty:
        return []
    while True:
        try:
            done.append(finished.get_nowait())
        except queue.Empty:
            return done
