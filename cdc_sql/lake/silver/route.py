"""Which way a silver window goes, and why: one pure decision (`route`), taken in one place
(merge.py) and printed per table by `cdc-sql plan`.

- the engine's SQL (steps.py, run by execute.py): the reference path, for every window;
- delta-rs in this process (lake/small_merge.py): a window of a table silver holds as it is,
  with nothing the engine's SQL alone handles (see small_merge's docstring);
- made of bronze's files: a plain table's first window on a local lake, silver's first version
  made of bronze's snapshot files' column chunks (lake/first_version.py); its changes then merge
  in this process.
Whether a window fits in memory, and whether delta-rs can write silver's protocol, are only
known from the files: small_merge.merged finds out, and hands the window back to the engine.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from cdc_sql import engine
from cdc_sql.config import layout
from cdc_sql.lake import first_version, small_merge
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.facts import Facts
from cdc_sql.lake.silver.plan import SilverPlan
from cdc_sql.lake.tables import choose
from cdc_sql.window import Window


class Way(Enum):
    ENGINE_SQL = "through the engine's SQL"
    IN_PROCESS = "merged in this process by delta-rs"
    FROM_BRONZE_FILES = "silver's first version made of bronze's files, changes by delta-rs"


@dataclass(frozen=True)
class Route:
    way: Way
    reason: str
    cluster: bool = False  # a whole snapshot went in: silver (and history) clustered if mixed

    @property
    def in_process(self) -> bool:
        return self.way is not Way.ENGINE_SQL


def route(plan: SilverPlan, window: Window | None, lake: Lake, facts: Facts | None = None,
          engine_mode: str | None = None) -> Route:
    """The way `window` goes, from what the plan, the window and its facts say (reads nothing).
    `window` None: the way of the table's windows as far as known before any run (`cdc-sql
    plan`; `engine_mode`: the engine's mode, whose tables delta-rs may not reach)."""
    cluster = window is not None and clusters(window)
    if window is None:
        reason = liquid(plan, lake, engine_mode) or \
            small_merge.plan_unsuitable(plan, lake.sql_only)
        silver = lake.silver_path(plan.spec.name)
        if reason is None and engine_mode is not None and \
                choose(engine_mode, silver) != "delta-rs":
            reason = (f"engine mode `{engine_mode}`: the lake's tables are the engine's to write "
                      f"(delta-rs in this process may not reach its storage)")
    else:
        reason = liquid(plan, lake) or \
            small_merge.unsuitable(plan, window, facts or Facts(), lake.sql_only)
    if reason is not None:
        return Route(Way.ENGINE_SQL, reason, cluster)
    if window is None:
        return Route(Way.IN_PROCESS, IN_PROCESS_RULE)
    if window.first and lake.local:
        return Route(Way.FROM_BRONZE_FILES, "a plain table's first window on a local path: "
                     "bronze's files' column chunks, when they hold the window's rows", cluster)
    return Route(Way.IN_PROCESS, "a plain table, the window holds what delta-rs merges", cluster)


def liquid(plan: SilverPlan, lake: Lake, engine_mode: str | None = None) -> str | None:
    """Why a table Delta liquid-clusters goes through the engine (its first version too,
    which it then clusters); None for any other. `engine_mode` (`cdc-sql plan`): the engine
    is not started, its mode says what it is where it can (engine.known)."""
    capable = lake.clusters_liquid
    if lake.engine is None and engine_mode is not None:
        capable = getattr(engine.known(engine_mode), "clusters_liquid", False)
    columns = layout.liquid_columns(plan.spec, capable)
    if not columns:
        return None
    return (f"liquid-clustered by {', '.join(columns)} (Delta's clustering table feature, "
            f"which delta-rs cannot write)")


def clusters(window: Window) -> bool:
    """Whether silver (and history) are clustered after the window, unless their files already
    hold disjoint key ranges (merge.cluster_if_mixed): when it wrote a whole snapshot."""
    return window.first or window.replace


IN_PROCESS_RULE = (
    f"when one has no DDL or TRUNCATE, the source's columns in bronze and silver, silver's "
    f"protocol asks for no feature delta-rs cannot write, and its MERGE fits in "
    f"{small_merge.MEMORY_BUDGET // 2**20} MB by the file sizes, or (an integer first key "
    f"column with file statistics, no change data feed) in key ranges that do; so is the "
    f"first batch (its snapshot rows written into silver's files, on a local path while they "
    f"are read); else through the engine's SQL below (engine.sql_only forces that)")


class EngineUse(NamedTuple):
    """How the engine merges a run's windows, as far as known before any run."""
    always: bool  # some table's windows go through it whatever their size
    by_size: bool  # some plain table's window past the memory budget does (small_merge.any_size)
    here: frozenset[str] = frozenset()  # the silver tables whose windows may be merged here


def engine_use(lake: Lake, plans: list[SilverPlan]) -> EngineUse:
    """Whether some table's windows go through the engine whatever their size (then it is
    worth starting while the source is read), and whether some plain table's may by their
    size alone. Otherwise a run of plain tables seldom needs it (a DDL, a protocol delta-rs
    cannot write). Each plan's route taken once."""
    here = [route(plan, None, lake).in_process for plan in plans]
    return EngineUse(not all(here),
                     any(h and not small_merge.any_size(plan) for h, plan in zip(here, plans)),
                     frozenset(plan.spec.name for h, plan in zip(here, plans) if h))


def made_of_bronze(lake: Lake, plans: list[SilverPlan]) -> dict[str, list[first_version.Target]]:
    """Per source table (qualified name), the silver tables this process will create, not
    there yet, whose first version may be made of bronze's files (lake/first_version.py):
    the snapshot splices their big files as it goes."""
    found: dict[str, list[first_version.Target]] = {}
    if not lake.local:
        return found
    for plan in plans:
        silver = lake.silver_path(plan.spec.name)
        if route(plan, None, lake).in_process and \
                lake.tables.merges_here(silver) and not lake.tables.exists(silver):
            found.setdefault(plan.sources[0].qualified, []).append(first_version.Target(
                lake.first_version_path(plan.spec.name), small_merge.silver_schema(plan)))
    return found
