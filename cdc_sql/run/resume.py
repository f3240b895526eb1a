"""Phase 0 and 1 of a run: which server, where on it capture resumes (after a failover, by
GTID), and, without a snapshot, where capture starts the first time (source/startup.py).
The resume decision is source/failover.py's `plan`, a pure function of what state recorded and
what the server says; this module asks the server, and acts on the answer."""
from __future__ import annotations

import dataclasses
import logging

import pymysql

from cdc_sql import resnapshot
from cdc_sql.config.startup import parse_timestamp
from cdc_sql.errors import SourceError
from cdc_sql.lake import bronze
from cdc_sql.lake.silver.plan import cascade_parents, silver_plans, sources_by_table
from cdc_sql.lake.state import CaptureEntry, Checkpoint, TableEntry
from cdc_sql.run.context import Run
from cdc_sql.source import binlog, failover, mysql, startup
from cdc_sql.source.failover import ResumePlan
from cdc_sql.source.offsets import Offset, Position
from cdc_sql.source.preflight import SourceView, now
from cdc_sql.source.watermarks import gtid_position

log = logging.getLogger("cdc_sql")
BINLOG_ONLY_STARTUP = ("latest", "earliest", "timestamp", "offset", "gtid")


def resolve_server(run: Run, view: SourceView,
                   checkpoint: Checkpoint) -> tuple[SourceView, ResumePlan]:
    """Trust a recorded position only on the server that wrote it, with the GTID there
    unchanged; else resume by GTID (failover.plan decides). Where capture cannot go on (a
    purged binlog, a server that is behind), it starts over if every table is to be read
    again. Returns the view with its server and base, and how capture resumes."""
    with mysql.cursor(run.pipeline.source) as cur:
        server = failover.server_identity(cur, view.mariadb)
        try:
            plan = _resume_here(run, view, checkpoint, cur, server)
        except SourceError as exc:
            if not {t.qualified for t in view.source_tables} <= \
                    resnapshot.requested(checkpoint):
                raise
            plan = _start_over(run, view, checkpoint, cur, server, str(exc))
    return dataclasses.replace(view, server=server, base=plan.base,
                               end=dataclasses.replace(view.end, base=plan.base)), plan


def _resume_here(run: Run, view: SourceView, checkpoint: Checkpoint, cur,
                 server: str) -> ResumePlan:
    """How capture goes on on `server` (failover.plan), once a purged binlog is dealt with and
    the GTID position at the recorded position asked where it matters; by GTID, only on a
    server that has every transaction capture read."""
    saved = checkpoint.capture
    if saved is not None and saved.position and saved.server in ("", server) and \
            resnapshot.purged(saved.at.file, view.first_binlog.file):
        saved = _purged(run, view, checkpoint, cur, server)
    recorded = failover.Recorded(saved.at, saved.server, saved.gtid) \
        if saved is not None and saved.position else failover.Recorded()
    here = gtid_here(run, view, cur, recorded.position) \
        if failover.wants_gtid_here(recorded, server, view.first_binlog.file) else None
    snapshot_servers = frozenset(s.server for s in checkpoint.all_splits() if s.done) \
        if saved is None else frozenset()  # split watermarks: places in one server's binlog
    plan = failover.plan(recorded, server, view.first_binlog.file, here, snapshot_servers,
                         view.mariadb)
    if plan.resume.by_gtid:
        cur.execute("SELECT @@global.gtid_binlog_pos" if view.mariadb else
                    "SELECT @@global.gtid_executed")
        failover.check_not_behind(saved.gtid, str(cur.fetchone()[0] or ""), server,
                                  view.mariadb)
        log.warning("capture resumes by GTID after %s: %s; offsets number this server's "
                    "binlog files %+d so they follow the old ones", saved.gtid,
                    plan.resume.reason, plan.base)
    return plan


def _start_over(run: Run, view: SourceView, checkpoint: Checkpoint, cur, server: str,
                why: str) -> ResumePlan:
    """Capture cannot go on on this server (another one, behind, without a GTID to resume
    from), but every table is to be read again: capture starts over at the server's
    current position, its files numbered on from what was read before, so offsets keep
    growing (failover.restart_base). Returns how capture resumes: from there, by position."""
    saved = checkpoint.capture
    read = [saved.at.offset] if saved and saved.position else \
        [Offset.parse(s.watermark) for s in checkpoint.all_splits() if s.watermark]
    base = failover.restart_base(read, view.first_binlog.file)
    end = dataclasses.replace(view.end, base=base)
    moved = _move_capture(run, saved, end, server, cur, view)
    log.warning("%s. Every table is being read again: capture starts over at %s", why, end)
    return ResumePlan(position=moved.at, base=base)


def _purged(run: Run, view: SourceView, checkpoint: Checkpoint, cur, server: str) -> CaptureEntry:
    """The binlog capture stopped in is gone. With `on_purged_binlog: resnapshot`, capture
    goes on from the oldest binlog the server has, and the source tables that needed the
    purged part are read again (resnapshot.py); else the run stops, saying so."""
    saved = checkpoint.capture
    gone = f"the source purged the binlog capture needs ({saved.at} onwards; its oldest " \
           f"binlog is {view.first_binlog.file})"
    if run.pipeline.source.on_purged_binlog != "resnapshot":
        raise SourceError(f"{gone}: the changes in between are lost to this pipeline. Set "
                          f"source.on_purged_binlog: resnapshot to read the tables again "
                          f"(or run cdc-sql resnapshot), and raise the binlog retention")
    oldest = dataclasses.replace(view.first_binlog, base=saved.at.base)
    plans = silver_plans(run.pipeline, view)
    again = resnapshot.affected_by_purge(checkpoint, sources_by_table(plans),
                                         oldest.offset.text, cascade_parents(plans))
    moved = _move_capture(run, saved, oldest, server, cur, view,
                               *resnapshot.requests(again, gone, now()))
    log.warning("%s: capture goes on from %s; read again: %s", gone, oldest,
                ", ".join(again) or "no table (none needed the purged part)")
    return moved


def _move_capture(run: Run, saved: CaptureEntry | None, to: Position, server: str, cur,
                  view: SourceView, *entries) -> CaptureEntry:
    """Capture goes on from `to` on `server`, recorded with `entries` in one state commit;
    rows a run landed past the old position (`landing`) are deleted from bronze first."""
    if saved is not None and saved.position:
        bronze.drop_after(run.lake, [tuple(t) for t in saved.landing], saved.at.offset)
    moved = CaptureEntry(position=str(to), server=server,
                         gtid=gtid_here(run, view, cur, to, strict=True))
    run.state.write(moved, *entries)
    return moved


def gtid_here(run: Run, view: SourceView, cur, position: Position, strict: bool = False) -> str:
    """The GTID position at `position` on this server: MariaDB's BINLOG_GTID_POS, MySQL's
    executed set read from the binlog ('' without GTIDs, or, unless `strict`, where the
    server has no such place)."""
    try:
        if view.mariadb:
            return gtid_position(cur, position)
        return binlog.mysql_gtids_at(run.pipeline.source, position) if view.gtids else ""
    except (pymysql.err.MySQLError, SourceError):
        if strict:
            raise
        return ""


def start_capture(run: Run, view: SourceView, checkpoint: Checkpoint) -> None:
    """Without a snapshot, capture starts at a place chosen on the first run (startup.py)."""
    source = run.pipeline.source
    if checkpoint.capture is not None or source.startup not in BINLOG_ONLY_STARTUP:
        return
    gtid = None
    if source.startup == "gtid":  # the server finds the place; the position there is given
        found, gtid = startup.gtid_position(source, source.startup_gtid, view.mariadb)
        start, gtid = (found, gtid) if found else (view.end, None)
    else:
        start = {
            "latest": lambda: view.end,
            "earliest": lambda: view.first_binlog,
            "offset": lambda: startup.offset_position(source, source.startup_offset),
            "timestamp": lambda: startup.timestamp_position(
                source, parse_timestamp(source.startup_timestamp)),
        }[source.startup]()
    run.state.write(CaptureEntry(position=str(start), server=view.server,
                                  gtid=gtid if gtid is not None else
                                  gtid_at(run, view, start)),
                     *(TableEntry(table=spec.name, applied=start.offset.text,
                                  snapshot_merged=True) for spec in run.pipeline.tables))
    log.info("capture starts at %s (startup: %s)", start, source.startup)


def gtid_at(run: Run, view: SourceView, position: Position) -> str:
    with mysql.cursor(run.pipeline.source) as cur:
        return gtid_here(run, view, cur, position, strict=True)
