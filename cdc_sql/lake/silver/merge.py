"""A silver window carried out: the rows its cascades changed, then its route (route.py): the
in-process MERGE or the engine's steps; a first window with history in two batches, history
starting where every split's read had ended. The one place a window's route is taken."""
from __future__ import annotations

from dataclasses import replace

import logging
import time

from cdc_sql import cascades
from cdc_sql.config import layout
from cdc_sql.errors import ConfigError
from cdc_sql.lake import first_version, small_merge, tables
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.cascade_rows import cascade_rows
from cdc_sql.lake.silver.evolve import start_history
from cdc_sql.lake.silver.execute import run_batch
from cdc_sql.lake.silver.facts import Statement, read_facts, read_statements
from cdc_sql.lake.silver.ownership import owned_tables, rows_untouched
from cdc_sql.lake.silver.plan import SilverPlan
from cdc_sql.lake.silver.route import clusters, route
from cdc_sql.lake.state import TableEntry
from cdc_sql.lake.tables import RESNAPSHOT_MARK, TableLayout
from cdc_sql.window import Window

log = logging.getLogger("cdc_sql")


def merge_window(lake: Lake, plan: SilverPlan, window: Window,
                 statements: list[Statement] | None = None, recorded: TableEntry | None = None,
                 cascading: list[cascades.ParentChange] = ()) -> list[cascades.ParentChange]:
    """The first batch (silver created from the snapshot rows; with history, history begins
    once silver is past every split's read) or an ordinary one. `recorded`: the table's entry
    as state recorded it with the window's start (silver's version, where cascades start from;
    history's version and id, whether an attempt of the window reached history); `cascading`:
    keys of parents that cascades deleted or changed in the window. Returns this table's own
    such keys (for the tables it cascades into). A window that wrote a whole snapshot leaves
    silver (and history) with one key range per file (route.Route.cluster)."""
    silver_version = recorded.silver_version if recorded is not None else None
    cascaded, moves = cascade_rows(lake, plan, window, statements, silver_version, cascading) \
        if plan.cascades else (None, [])
    if window.replace and plan.spec.change_data_feed and \
            replaced_already(lake, plan, silver_version):
        window = replace(window, replaced=True)
    if plan.spec.history and not (window.first or window.replace) and recorded is not None \
            and rows_untouched(lake, lake.history_path(plan.spec.name), recorded.history_version,
                               recorded.history_id):
        window = replace(window, history_untouched=True)
    if not window.first or not plan.spec.history:
        _batches(lake, plan, window, statements, cascaded)
    else:
        _first_with_history(lake, plan, window, statements, cascaded)
    if clusters(window):
        liquid = layout.liquid_columns(plan.spec, lake.clusters_liquid)
        for path in owned_tables(lake, plan.spec).values():
            if liquid:
                cluster_liquid(lake, plan, path, optimize=True)
            else:
                cluster_if_mixed(lake, path, layout.cluster_columns(plan.spec, plan.key))
    return moves


def replaced_already(lake: Lake, plan: SilverPlan, silver_version: int | None) -> bool:
    """Whether a re-snapshot replaced silver after the version state recorded last: this
    window, in a run killed before its state commit (nothing else replaces silver, and every
    other window commits state after its steps). The replay's window may reach further than
    the killed one (capture moved on), so its rows are merged, not skipped."""
    path = lake.silver_path(plan.spec.name)
    commits = lake.tables.history(path, silver_version) \
        if silver_version is not None and lake.tables.exists(path) else None
    return any(operation == RESNAPSHOT_MARK for _, operation, _ in commits or ())


def _first_with_history(lake: Lake, plan: SilverPlan, window: Window,
                        statements: list[Statement] | None, cascaded: tuple | None) -> None:
    """Silver up to where history starts, then history from silver, then the rest."""
    start = window.history_start or window.upto
    if not lake.tables.exists(lake.history_path(plan.spec.name)):  # else a rerun: past it
        silver_only = replace(plan, spec=replace(plan.spec, history=False))
        batch(lake, silver_only, replace(window, upto=min(start, window.upto)), statements,
              cascaded)
        start_history(lake, plan)
    if start < window.upto:
        _batches(lake, plan, Window(start, window.upto), statements, cascaded)


def _batches(lake: Lake, plan: SilverPlan, window: Window, statements: list[Statement] | None,
             cascaded: tuple | None) -> None:
    """The window's batch; with history, one batch up to each TRUNCATE or partition removal
    and one after (cut_at_removals)."""
    if not plan.spec.history or window.replace:
        batch(lake, plan, window, statements, cascaded)
        return
    statements = read_statements(lake) if statements is None else statements
    for piece in cut_at_removals(plan, window, statements):
        batch(lake, plan, piece, statements, cascaded)


def cut_at_removals(plan: SilverPlan, window: Window, statements: list[Statement]) -> list[Window]:
    """A window of a table with history, cut after each TRUNCATE or partition removal of its
    sources: a batch ends versions there once its MERGE is done (execute.apply_truncates), so
    in one batch a version a later change of the key ended (or, with chosen columns, updated
    in place) would end at that change, or too. Cut there, the version ends at the TRUNCATE
    and the later change starts one of its own, as at the source. A replay cuts the same
    pieces. Pure."""
    sources = {(s.db, s.name) for s in plan.sources}
    cuts = sorted({s.offset for s in statements if (s.db, s.tbl) in sources and
                   s.op in ("truncate", "delete") and window.after < s.offset < window.upto})
    if window.splits is not None or not cuts:
        return [window]
    bounds = [window.after, *cuts, window.upto]
    return [Window(after, upto) for after, upto in zip(bounds, bounds[1:])]


def batch(lake: Lake, plan: SilverPlan, window: Window, statements: list[Statement] | None = None,
          cascaded: tuple | None = None) -> None:
    """One batch by its route: in this process when it may be (and the files agree), else the
    engine's steps. `cascaded`: the rows cascades changed (cascade_rows)."""
    started = time.monotonic()
    with lake.tables.pinned():  # nothing else writes silver or bronze until the engine's steps
        facts = read_facts(lake, plan, window, statements)
        log.debug("silver %s: facts in %.3fs", plan.spec.name, time.monotonic() - started)
        way = route(plan, window, lake, facts)
        if way.in_process and small_merge.merged(lake, plan, window, facts):
            return
        if window.first:
            first_version.discard(lake, plan.spec.name)  # spliced ahead, not taken
        if not way.in_process:
            log.debug("silver %s: merged by the engine: %s", plan.spec.name, way.reason)
    run_batch(lake, plan, window, facts, cascaded)


def lay_out(lake: Lake, plan: SilverPlan) -> None:
    """Silver and history, where they exist, given the properties the pipeline asks for
    (config/layout.py) that they lack: a pipeline that turns the change data feed on later
    gets it from the next window on, in one SET TBLPROPERTIES commit per table (cdc-sql's own
    to the hand-change check). New tables get them in the commit that creates them. So with
    the columns Delta liquid-clusters them by (cluster_liquid), on an engine that can; and
    history partitioned (partition_history). Each table's layout is read once (one DESCRIBE
    DETAIL where only the engine reads the lake)."""
    wanted = layout.properties(plan.spec)
    liquid = lake.clusters_liquid
    history = lake.history_path(plan.spec.name)
    for path in owned_tables(lake, plan.spec).values():
        if not (wanted or liquid or path == history):
            continue
        found = lake.tables.layout(path)
        if found is None:
            continue
        missing = {}
        if wanted and found.properties is None:
            log.info("silver %s: %s keeps the properties it has (this engine can neither "
                     "tell nor set a table's properties): %s not given", plan.spec.name, path,
                     ", ".join(wanted))
        elif wanted:
            missing = layout.missing(wanted, found.properties)
        if missing:
            lake.tables.set_properties(path, missing)
            log.info("silver %s: %s given %s", plan.spec.name, path, missing)
        if liquid:
            found = cluster_liquid(lake, plan, path, optimize=False, found=found)
        if path == history:
            partition_history(lake, plan, found)


def partition_history(lake: Lake, plan: SilverPlan, found: TableLayout) -> None:
    """A history table written before cdc-sql partitioned history (`found`: its layout)
    rewritten partitioned by `_cdc_current` (layout.history_partitions), once, in one commit
    of cdc-sql's own: then a window's MERGE reads its current versions only. Not with a
    change data feed (the rewrite would show in it as every version deleted and inserted
    again), nor where Delta clusters the table, nor where the engine cannot say how a table
    is partitioned (a Sail server whose lake this process does not reach). A table the
    rewrite fails on stays as it is: its MERGEs are right either way."""
    path, wanted = lake.history_path(plan.spec.name), layout.history_partitions(
        plan.spec, lake.clusters_liquid)
    if not wanted or plan.spec.change_data_feed or found.partitions != [] or \
            (lake.clusters_liquid and found.clustering):
        return
    try:
        lake.tables.reshape(path, {}, [], partitions=wanted)
    except Exception as exc:  # noqa: BLE001 - faster MERGEs lost, nothing else: said, not raised
        log.info("silver %s: %s stays unpartitioned (%s)", plan.spec.name, path,
                 str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return
    log.info("silver %s: %s partitioned by %s", plan.spec.name, path, ", ".join(wanted))


def cluster_liquid(lake: Lake, plan: SilverPlan, path: str, optimize: bool,
                   found: TableLayout | None = None) -> TableLayout | None:
    """A table given the liquid clustering its `cluster_by` asks for (layout.cluster_by_change:
    CLUSTER BY the columns, or NONE once the pipeline names none), its files clustered again
    by new columns in one OPTIMIZE FULL; `optimize` (after a snapshot): OPTIMIZE either way.
    Only the engine writes these commits (delta-rs cannot write the clustering feature): a
    table that did not have it gets its later windows through the engine (route.liquid). A
    history table created partitioned (layout.history_partitions) stays so. `found`: the
    table's layout (else read here); returns it as the table now is (None: no table)."""
    found = lake.tables.layout(path) if found is None else found
    if found is None:
        return None
    if found.partitions:  # history, before `cluster_by` was named
        log.info("silver %s: %s stays partitioned by %s, not liquid-clustered (Delta clusters "
                 "no partitioned table)", plan.spec.name, path, ", ".join(found.partitions))
        return found
    change = layout.cluster_by_change(plan.spec, lake.clusters_liquid, found.clustering)
    if change:
        _check_statistics(lake, plan, path, change, found.properties or {})
    if change is not None:
        lake.tables.alter_clustering(path, change)
        log.info("silver %s: %s liquid-clustered by %s", plan.spec.name, path,
                 ", ".join(change) or "nothing (CLUSTER BY NONE)")
    if change or (optimize and plan.spec.cluster_by):
        lake.tables.recluster(path, full=bool(change))
    return found if change is None else replace(found, clustering=list(change))


def _check_statistics(lake: Lake, plan: SilverPlan, path: str, columns: tuple[str, ...],
                      properties: dict[str, str]) -> None:
    """Refuse, in one line naming the table, the key and the column, liquid clustering by a
    column Delta keeps no statistics of there (`properties`: the table's), before its ALTER
    TABLE (which would fail with Delta's own message); silver stays as it was, readable."""
    missing = tables.without_statistics(columns, lake.tables.schema(path), properties)
    for n, column in enumerate(plan.spec.cluster_by):
        if column in missing:
            raise ConfigError(f"table `{plan.spec.name}`, cluster_by[{n}] `{column}`: "
                              f"{missing[column]} in {path}, and Delta liquid-clusters only "
                              f"by columns with statistics: cluster by others")


def cluster_if_mixed(lake: Lake, path: str, key: list[str]) -> bool:
    """Rewrite a table sorted by key unless its files already hold disjoint key ranges of a
    moderate size (the first silver version, written file for file from bronze's key-range
    groups, usually does, and clustering it again costs seconds). Returns whether it clustered."""
    if tables.clustered(lake.tables.key_ranges(path, key[0])):
        return False
    lake.tables.cluster(path, key)
    return True
