"""Named crash points for the crash tests: `CDC_SQL_KILL_AT=<point>` makes the process SIGKILL
itself when it reaches that point (`<point>@<n>`: the n-th time). Unset, a point costs one dict
lookup. Points sit where a crash is most telling: between two commits that belong together.
"""
from __future__ import annotations

import os
import signal

POINTS = ("resnapshot.reset", "split.written", "bronze.appended", "silver.first_spliced",
          "silver.snapshot_written", "silver.staged", "silver.merged", "history.staged",
          "history.merged", "state.committed")
_seen: dict[str, int] = {}
_also: list[int] = []  # processes killed with this one (a merge worker's run)


def kill_also(pid: int) -> None:
    """A point reached here kills process `pid` too (a worker of a run kills the run)."""
    _also.append(pid)


def point(name: str) -> None:
    wanted = os.environ.get("CDC_SQL_KILL_AT")
    if not wanted:
        return
    target, _, nth = wanted.partition("@")
    if target == name:
        _seen[name] = _seen.get(name, 0) + 1
        if _seen[name] >= int(nth or 1):
            for pid in (*_also, os.getpid()):
                os.kill(pid, signal.SIGKILL)
