"""State commits of parallel tasks, batched: whatever finishes together is recorded together."""
from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, wait

from cdc_sql import faults
from cdc_sql.lake.state import State

# Tasks that finish within this many seconds of each other share one state commit. Waiting
# costs nothing: a crash loses only the record, and the work is done again (harmlessly).
STATE_COMMIT_SECONDS = 1.0


def record_as_done(state: State, futures: list[Future]) -> list:
    """Wait for tasks that return state entries; whatever finished together is recorded in
    one state commit (a thousand small tables do not make a thousand commits). Every task
    runs to its end; the first failure is raised after the others are recorded."""
    recorded, entries, failure, pending = [], [], None, set(futures)
    last_commit = 0.0  # the first task to finish is recorded at once
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED,
                             timeout=max(0.0, last_commit + STATE_COMMIT_SECONDS -
                                         time.monotonic()) if entries else None)
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
