"""When the engine starts: the one place that decides it.

Starting the engine (Sail, a Spark session) takes seconds. A run starts it early, while the
source is read (the snapshot's readers wait on the server; capture reads the binlog), when it
will surely be used: tables registered in a catalog, or a table whose windows go through the
engine's SQL whatever their size (lake/silver/route.py), and only if there is something to read
(`early_for_capture`). Otherwise it starts on first use, if ever: the lake's
engine is lazy, and a run of plain tables seldom needs it (a DDL, a protocol delta-rs cannot
write). Where the engine may merge a window of any size, it also bounds how much one capture
pass gathers (`decide`)."""
from __future__ import annotations

from typing import NamedTuple

from cdc_sql.config.model import Pipeline
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver import route
from cdc_sql.lake.silver.plan import SilverPlan
from cdc_sql.source.offsets import Position


class Policy(NamedTuple):
    """What a run decides about the engine from its plans."""
    early: bool  # start it while the source is read
    window_bytes: int  # where a capture pass ends, in bytes of row images (0: no bound)
    here: frozenset[str] = frozenset()  # the silver tables whose windows may be merged here


def decide(pipeline: Pipeline, lake: Lake, plans: list[SilverPlan]) -> Policy:
    """Whether this run starts the engine while the source is read (a catalog schema, or some
    table whose windows all go through it), and where a capture pass ends:
    `engine.window_bytes` when the engine may merge some table's window, whose memory
    follows the window's size (route.engine_use: a table whose windows all go through it, or a
    plain one whose window past the memory budget does), else 0 (at the position it was to
    reach: a plain table's window is merged here in key ranges, whatever its size); and the
    tables whose windows may be merged in this process (run/merge_phase.py). The plans'
    routes walked once."""
    use = route.engine_use(lake, plans)
    return Policy(early=bool(pipeline.target.schema) or use.always,
                  window_bytes=pipeline.engine.window_bytes if use.always or use.by_size
                  else 0, here=use.here)


def start_early(lake: Lake, early: bool) -> None:
    """Start the engine now if the policy says early."""
    if early:
        lake.engine.prepare()


def early_for_capture(early: bool, start: Position, stop_at: Position) -> bool:
    """Whether a capture pass starts the engine while it reads: if the policy says early,
    and there is binlog to read. A pass that stands where it is to stop reads nothing, and a
    scheduled run that finds nothing new may need no engine at all (its start took 0.5 s of
    CPU and the exit waited for it); a window left from an earlier run starts it on first use."""
    return early and start != stop_at
