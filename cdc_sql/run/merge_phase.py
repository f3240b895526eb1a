"""Phase 4 of a run: each silver table's next window (planner.py) merged (lake/silver/merge.py),
`target.parallelism` tables at once, a group of tables whose cascades set off cascades as one;
state records each table's applied offset after its MERGE, in batched commits. Light merges
(`light`: a small table merged in this process, whose work holds Python's lock) take a lane
of LIGHT_WORKERS threads of their own (more threads only contend for the lock), or, many of
them, the run's worker processes (workers.py)."""
from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from cdc_sql import planner, resnapshot, workers
from cdc_sql.lake import file_merge
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.facts import Statement, read_statements
from cdc_sql.lake.silver.merge import lay_out, merge_window
from cdc_sql.lake.silver.ownership import check_untouched, owned_tables, owned_versions
from cdc_sql.lake.silver.plan import SilverPlan, chained
from cdc_sql.lake.state import Checkpoint, TableEntry
from cdc_sql.planner import chain_merge, next_window
from cdc_sql.run.commits import record_as_done
from cdc_sql.run.context import Run
from cdc_sql.run.summary import Batch
from cdc_sql.window import Window

log = logging.getLogger("cdc_sql")
# Light merges at once: on 1,000 tables of 10 rows, a change in each merged in 6.2-6.8 s by
# two threads, 6.9-7.9 s by one and 7.4-7.6 s by four (docs/performance.md).
LIGHT_WORKERS = 2
LIGHT_BYTES = file_merge.WHOLE_BYTES  # of silver's files, and of bronze's changes


def light(silver_bytes: int, changes_bytes: int) -> bool:
    """Whether the merge of a table merged in this process, on local storage, is light, by
    the bytes of silver's files and of the bronze its windows come from. Pure."""
    return silver_bytes <= LIGHT_BYTES and changes_bytes <= LIGHT_BYTES


@dataclass(frozen=True)
class Seen:
    """What this run's capture saw, so idle tables advance without a MERGE (heartbeat): each
    pass that read (where it began, the source tables it wrote), in order, and whether the
    last one reached where it was to stop (False: it ended at its bound, capture goes on after
    this merge pass; idle tables then wait for the last)."""

    passes: tuple[tuple[str, frozenset[str]], ...] = ()
    last: bool = True
    _since: dict = field(default_factory=dict, compare=False, repr=False)  # by `applied`

    def after(self, started_at: str | None, changed: frozenset[str], last: bool) -> "Seen":
        """With the pass that just ended (`started_at` None: it read nothing)."""
        passes = self.passes if started_at is None else (*self.passes, (started_at, changed))
        return Seen(passes, last)

    @property
    def captured_from(self) -> str | None:
        """Where the run's first pass began (None: no capture yet)."""
        return self.passes[0][0] if self.passes else None

    def changed_since(self, applied: str) -> frozenset[str]:
        """The source tables written by the passes that may hold changes past `applied`:
        every pass that ends after it (a pass ends where the next begins; the last is still
        going). Pure (each `applied` worked out once: thousands of tables share one)."""
        found = self._since.get(applied)
        if found is None:
            ends = [start for start, _ in self.passes[1:]]
            found = self._since[applied] = frozenset().union(*(
                changed for (_, changed), end in zip(self.passes, [*ends, None])
                if end is None or end > applied))
        return found


def merged_alone(lake: Lake, plan: SilverPlan, entry: TableEntry | None, window: Window,
                 statements: list[Statement], lay: bool) -> tuple[dict, float]:
    """A table's window merged by a worker (workers.py) as `MergePhase._merge_table` merges a
    table alone: silver checked untouched, laid out if `lay`, the window merged; silver's (and
    history's) versions after it, and the seconds it took."""
    started = time.monotonic()
    if entry is not None:
        check_untouched(lake, plan.spec, entry)
    if lay:
        lay_out(lake, plan)
    merge_window(lake, plan, window, statements, entry)
    return owned_versions(lake, plan.spec), round(time.monotonic() - started, 3)


class MergePhase:
    """The merge phase of one run; remembers only the tables it registered by name and gave
    their properties."""

    def __init__(self, run: Run):
        self.run = run
        self.registered: set[str] = set()  # silver tables registered by name in this run
        self.laid_out: set[str] = set()  # silver tables given their properties in this run
        self.running: list[Future] = []  # state entries of the workers' merges, not recorded

    def merge(self, plans: list[SilverPlan], checkpoint: Checkpoint, seen: Seen,
              batches: list[Batch], here: frozenset[str] = frozenset()) -> list[str]:
        """Merge each silver table's next window, `target.parallelism` tables at once (a group
        of tables whose cascades set off cascades as one, light merges on a lane of their
        own); returns the tables that moved. `batches`: the run's commits, to which each
        table's MERGE is added as it is done (so a failed run's metrics keep those that
        were). `here`: the tables whose windows may be merged in this process. Where capture
        goes on after this pass (`seen.last` False), the workers' merges are left running
        while it reads: `finish` records them."""
        run = self.run
        threads = max(1, min(run.pipeline.target.parallelism, len(plans)))
        statements = read_statements(run.lake)
        groups = [] if run.pipeline.source.startup == "snapshot-only" else chained(plans)
        grouped = {plan.spec.name for group in groups for plan in group}

        def changed(plan: SilverPlan) -> bool:  # before capture's last pass, only these merge
            entry = checkpoint.table(plan.spec.name)
            return entry is None or not self._quiet(plan, entry.applied, seen)

        alone = [plan for plan in plans if plan.spec.name not in grouped and
                 (seen.last or changed(plan))]
        with run.lake.tables.pinned():  # (reads only)
            lighter = {plan.spec.name for plan in alone if plan.spec.name in here and
                       self._light(plan)}
        elsewhere = run.workers.start(workers.count(len(lighter), os.cpu_count() or 1,
                                                    threads)) if lighter else 0
        with ThreadPoolExecutor(threads, "merge") as pool, \
                ThreadPoolExecutor(min(threads, LIGHT_WORKERS), "merge-light") as lane:
            sent = self._send([p for p in alone if p.spec.name in lighter], checkpoint,
                              statements, seen, batches, lane) if elsewhere else []
            if not seen.last:
                self.running, sent = self.running + sent, []
            entries = record_as_done(run.state,
                [pool.submit(self._merge_chain, group, checkpoint, statements, batches)
                 for group in groups] + sent +
                [(lane if plan.spec.name in lighter else pool).submit(
                    self._merge_table, plan, checkpoint, statements, seen, batches)
                 for plan in alone if not (elsewhere and plan.spec.name in lighter)])
        return [e.table for e in entries]

    def finish(self, quiet: bool = False) -> list[str]:
        """Wait for the merges the workers were left doing and record them (the first failure
        raised once the rest are, unless `quiet`: the run is failing already); the tables
        that moved."""
        running, self.running = self.running, []
        try:
            return [e.table for e in record_as_done(self.run.state, running)] if running else []
        except Exception as exc:  # noqa: BLE001 - the run's own error goes on
            if not quiet:
                raise
            log.debug("a worker's merge failed too: %s", exc)
            return []

    def _light(self, plan: SilverPlan) -> bool:
        """Whether the table, whose windows may be merged here, has a silver merged here on
        local storage and a `light` merge (the tables' logs read once, for the merge too)."""
        lake = self.run.lake
        silver = lake.silver_path(plan.spec.name)
        if not lake.local or not lake.tables.exists(silver) or \
                not lake.tables.merges_here(silver):
            return False
        changes = [lake.changes_path(t.db, t.name) for t in plan.sources]
        return all(map(lake.tables.exists, changes)) and light(
            lake.tables.file_bytes(silver), sum(map(lake.tables.file_bytes, changes)))

    def _merge_table(self, plan: SilverPlan, checkpoint: Checkpoint, statements: list[Statement],
                     seen: Seen, batches: list[Batch]) -> list[TableEntry]:
        """One table's window into silver; returns its state entry (none without a window)."""
        window = self._window(plan, checkpoint, seen)
        return [] if window is None else \
            [self._merged(plan, checkpoint, window, statements, batches)[0]]

    def _merge_chain(self, group: list[SilverPlan], checkpoint: Checkpoint,
                     statements: list[Statement], batches: list[Batch]) -> list[TableEntry]:
        """Tables whose cascades set off cascades, parents first, up to one U: each passes the
        keys its cascades deleted or changed on to the next. Their state entries commit
        together, so a replay works the same cascades out again. All wait while one of them
        waits for its snapshot; a table whose window starts before a parent's (added later,
        say) cannot get that parent's moves: they then merge on their own, with a warning."""
        windows = [self._window(plan, checkpoint, None) for plan in group]
        how = chain_merge([(p.sources[0].qualified, tuple(fk.parent for fk in p.cascades), w,
                            planner.caught_up(checkpoint.table(p.spec.name), checkpoint.capture))
                           for p, w in zip(group, windows)])
        ready = [(p, w) for p, w in zip(group, windows) if w is not None]
        if how == "wait":
            return []
        if how == "apart":
            log.warning("silver %s: a window starts before its parent's, so cascades set off "
                        "by cascades are not applied to it this once: run `cdc-sql verify`",
                        ", ".join(p.spec.name for p, _ in ready))
            return [self._merged(p, checkpoint, w, statements, batches)[0] for p, w in ready]
        entries, moves = [], []
        for plan, window in ready:
            entry, mine = self._merged(plan, checkpoint, window, statements, batches, moves)
            entries.append(entry)
            moves += mine
        return entries

    def _window(self, plan: SilverPlan, checkpoint: Checkpoint,
                seen: Seen | None, check: bool = True) -> Window | None:
        """The table's next window (planner.py); None when it must wait (also while a
        re-snapshot of one of its source tables is asked for and not yet prepared: rows
        changed without row events stay out of silver until it replaces them). `seen`: what
        capture saw, for an idle window (None: never idle; before capture's last pass `merge`
        hands over only tables that are not idle). `check`: silver checked untouched (else
        whoever merges the window checks it)."""
        if any(t.qualified in resnapshot.requested(checkpoint) for t in plan.sources):
            return None
        entry = checkpoint.table(plan.spec.name)
        # every run, changes or not: silver must hold only what we wrote
        if entry is not None and check:
            check_untouched(self.run.lake, plan.spec, entry)
        splits = [s for t in plan.sources for s in checkpoint.splits(t.qualified)]
        return next_window(entry, splits, checkpoint.capture,
                           snapshot_only=self.run.pipeline.source.startup == "snapshot-only",
                           history=plan.spec.history,
                           idle=seen is not None and entry is not None and
                           self._idle(plan, entry.applied, seen))

    def _send(self, plans: list[SilverPlan], checkpoint: Checkpoint,
              statements: list[Statement], seen: Seen, batches: list[Batch],
              lane: ThreadPoolExecutor) -> list[Future]:
        """The tables' windows merged by the run's workers (workers.py), as `_merge_table`
        would: a future of each one's state entry (a table without a merge to do: on `lane`,
        in this process)."""
        futures, tasks, windows = [], [], []
        for plan in plans:
            window = self._window(plan, checkpoint, seen, check=False)
            if window is None or window.idle:
                futures.append(lane.submit(self._merge_table, plan, checkpoint, statements,
                                           seen, batches))
                continue
            entry, sources = checkpoint.table(plan.spec.name), {(t.db, t.name)
                                                                for t in plan.sources}
            tasks.append((plan, entry, window, [s for s in statements if (s.db, s.tbl) in sources],
                          plan.spec.name not in self.laid_out))
            windows.append((plan, window))
        for (plan, window), merged in zip(windows, self.run.workers.map(merged_alone, tasks)):
            futures.append(self._entry_of(plan, checkpoint, window, merged, batches))
        return futures

    def _entry_of(self, plan: SilverPlan, checkpoint: Checkpoint, window: Window,
                  merged: Future, batches: list[Batch]) -> Future:
        """A future of the table's state entry once `merged` (merged_alone's) is done."""
        entry: Future = Future()

        def done(merged: Future) -> None:
            try:
                versions, seconds = merged.result()
                self.laid_out.add(plan.spec.name)
                entry.set_result([self._entry(plan, checkpoint, window, versions, seconds,
                                              batches)])
            except BaseException as exc:  # noqa: BLE001 - the entry's: raised by the phase
                entry.set_exception(exc)

        merged.add_done_callback(done)
        return entry

    def _merged(self, plan: SilverPlan, checkpoint: Checkpoint, window: Window,
                statements: list[Statement], batches: list[Batch],
                cascading: list = ()) -> tuple[TableEntry, list]:
        """The window into silver: the table's state entry, and the keys its cascades deleted
        or changed."""
        lake = self.run.lake
        started = time.monotonic()
        entry = checkpoint.table(plan.spec.name)
        moves = []
        if plan.spec.name not in self.laid_out:
            lay_out(lake, plan)
            self.laid_out.add(plan.spec.name)
        if not window.idle:
            moves = merge_window(lake, plan, window, statements, entry, cascading)
        return self._entry(plan, checkpoint, window, owned_versions(lake, plan.spec),
                           round(time.monotonic() - started, 3), batches), moves

    def _entry(self, plan: SilverPlan, checkpoint: Checkpoint, window: Window, versions: dict,
               seconds: float, batches: list[Batch]) -> TableEntry:
        """The table's state entry once its window is in silver (`versions`: owned_versions
        after it), its batch counted and silver registered."""
        capture, entry = checkpoint.capture, checkpoint.table(plan.spec.name)
        source_time = capture.source_time if capture and window.upto == capture.offset else None
        batches.append(Batch(phase="merge", table=plan.spec.name, seconds=seconds))
        self._register(plan)
        log.info("silver %s: merged up to %s", plan.spec.name, window.upto)
        return TableEntry(table=plan.spec.name, applied=window.upto, snapshot_merged=True,
                          source_time=source_time, key=list(plan.key),
                          sources=[t.qualified for t in plan.sources],
                          cascade_parents=sorted({fk.parent for fk in plan.cascades}),
                          ranged=max(window.ranged, entry.ranged if entry else -1), **versions)

    def _register(self, plan: SilverPlan) -> None:
        target, lake = self.run.pipeline.target, self.run.lake
        if target.schema and plan.spec.name not in self.registered:
            tables = {plan.spec.name: lake.silver_path(plan.spec.name)}
            if plan.spec.history:
                tables[f"{plan.spec.name}_history"] = lake.history_path(plan.spec.name)
            for table, path in tables.items():
                name = lake.engine.register(target.catalog, target.schema, table, path)
                log.info("silver %s: registered as %s", plan.spec.name, name)
            self.registered.add(plan.spec.name)

    def _idle(self, plan: SilverPlan, applied: str, seen: Seen) -> bool:
        """planner.idle, with what this run captured and whether the table's tables exist
        (looked at only where the rest says idle)."""
        lake = self.run.lake
        return self._quiet(plan, applied, seen) and \
            all(lake.tables.exists(p) for p in owned_tables(lake, plan.spec).values())

    def _quiet(self, plan: SilverPlan, applied: str, seen: Seen) -> bool:
        """planner.idle without a look at the table's tables: this run's capture wrote nothing
        it reads past `applied`. Before capture's last pass, only tables that are not quiet
        merge (a look at ten thousand tables' logs a pass takes seconds)."""
        reads = [t.qualified for t in plan.sources] + [fk.parent for fk in plan.cascades]
        return planner.idle(seen.captured_from, applied, reads, seen.changed_since(applied),
                            True)
