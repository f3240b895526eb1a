"""Where a pipeline stands, from its checkpoint and (when reachable) the source's binlog.

Per table: phase (snapshot until its silver first merges, then binlog; resnapshot while one is
requested or under way), splits done/total, the applied offset, and the lag: binlog bytes the
source has written past that offset, and seconds since the source was last seen at or before it
(0 when no bytes are behind). `status --json`
prints `report()` as it is; docs/operations.md documents the fields.
"""
from __future__ import annotations

import datetime as dt
import logging

from cdc_sql.config.model import matching
from cdc_sql.source import mysql
from cdc_sql.source.offsets import Offset, Position, file_sequence
from cdc_sql.source.watermarks import binary_log_status


log = logging.getLogger("cdc_sql")


def source_binlog(pipeline) -> tuple[Position | None, list[tuple[str, int]]]:
    """The source's binlog end and files, or (None, []) when it cannot be reached."""
    try:
        with mysql.cursor(pipeline.source) as cur:
            end, _ = binary_log_status(cur)
            cur.execute("SHOW BINARY LOGS")
            return end, [(row[0], int(row[1])) for row in cur.fetchall()]
    except Exception as exc:  # noqa: BLE001 - status still shows what state knows
        log.warning("source not reached, lag unknown: %s", exc)
        return None, []


def lag_bytes(applied: str | None, end: Position, logs: list[tuple[str, int]],
              base: int = 0) -> int | None:
    """Binlog bytes between the applied offset and the source's end (`SHOW BINARY LOGS` sizes);
    `base`: what the source's file numbers get in offsets (after a failover)."""
    if not applied:
        return None
    start = Offset.parse(applied)
    end_seq = file_sequence(end.file) + base
    total = 0
    for name, size in logs:
        seq = file_sequence(name) + base
        if seq < start.file_seq or seq > end_seq:
            continue
        upper = end.pos if seq == end_seq else size
        lower = start.pos if seq == start.file_seq else 0
        total += max(0, upper - lower)
    return total


def lag_seconds(behind: int | None, source_time: str | None, now: dt.datetime) -> float | None:
    if behind == 0:
        return 0.0
    if behind is None or not source_time:
        return None
    return round((now - dt.datetime.fromisoformat(source_time)).total_seconds(), 1)


def report(pipeline, checkpoint, end: Position | None, logs: list[tuple[str, int]],
           now: dt.datetime | None = None, soft_deleted: dict | None = None) -> dict:
    """The status as JSON-ready values; `end`/`logs` None/[] when the source was not reached;
    `soft_deleted`: per table with soft deletes, its rows flagged deleted (when read)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    capture = checkpoint.capture
    position = capture.position if capture else None
    base = Position.parse(position).base if position else 0
    last = checkpoint.last_run
    out = {"pipeline": pipeline.name, "source_reached": end is not None,
           "source_position": str(end) if end else None,
           "captured_position": position,
           "captured_gtid": capture.gtid if capture else None,
           "captured_server": capture.server if capture else None,
           "captured_lag_bytes": _lag(position, end, logs),
           "xa_held": {xid: held["start"] for xid, held in sorted(capture.held.items())}
           if capture else {},
           "last_run": last.to_json() if last else None, "tables": []}
    splits, again = {}, {}
    for entries, found in ((checkpoint.all_splits(), splits), (checkpoint.resnapshots(), again)):
        for entry in entries:
            found.setdefault(entry.source_table, []).append(entry)
    names = sorted({tuple(name.split(".", 1)) for name in [*splits, *again]})
    for spec, sources in zip(pipeline.tables, matching(pipeline.tables, names)):
        mine = [s for db, name in sources for s in splits.get(f"{db}.{name}", [])]
        table = checkpoint.table(spec.name)
        ranges = [s for s in mine if s.predicate and s.split_id > (table.ranged if table else -1)
                  and not (s.done and table and (s.watermark or "") < table.applied)]
        mine = [s for s in mine if not s.predicate]  # the snapshot's key ranges
        requested = [e for db, name in sources for e in again.get(f"{db}.{name}", [])
                     if not e.prepared or table is not None and table.resnapshot]
        applied = table.applied if table else None
        behind = lag_bytes(applied, end, logs, base) if end else None
        source_time = table.source_time if table else None
        out["tables"].append({
            "name": spec.name,
            "phase": "resnapshot" if requested else
                     "binlog" if table and table.snapshot_merged else "snapshot",
            "resnapshot": {"since": min(e.requested_at for e in requested),
                           "reason": requested[0].reason,
                           "changes_after": table.resnapshot if table else ""}
            if requested else None,
            "range_reread": [{"where": s.predicate, "read": s.done, "rows": s.rows}
                             for s in ranges] or None,
            "splits_done": sum(s.done for s in mine),
            "splits_total": len(mine),
            "snapshot_rows": sum(s.rows or 0 for s in mine),
            "applied_offset": applied,
            "source_time": source_time,
            "lag_bytes": behind,
            "lag_seconds": lag_seconds(behind, source_time, now),
            "deletes": spec.deletes,
            "skip": list(spec.skip),
            "soft_deleted_rows": (soft_deleted or {}).get(spec.name),
        })
    return out


def _lag(position: str | None, end: Position | None, logs) -> int | None:
    if not position or end is None:
        return None
    at = Position.parse(position)
    return lag_bytes(at.offset.text, end, logs, at.base)


def render(status: dict) -> str:
    """A table for a terminal."""
    source = status["source_position"] or "unreachable"
    lines = [f"pipeline {status['pipeline']}: source at {source}, binlog captured to "
             f"{status['captured_position'] or '-'}"
             + (f" ({_bytes(status['captured_lag_bytes'])} behind)"
                if status["captured_lag_bytes"] is not None else "")
             + (f", GTID {status['captured_gtid']}" if status.get("captured_gtid") else ""),
             f"{'table':<24} {'phase':<10} {'splits':>9} {'rows':>11}  {'applied offset':<26} "
             f"{'lag':>9} {'lag s':>7}"]
    for t in status["tables"]:
        lag_s = "-" if t["lag_seconds"] is None else f"{t['lag_seconds']:.0f}"
        lines.append(f"{t['name']:<24} {t['phase']:<10} {t['splits_done']:>4}/{t['splits_total']:<4} "
                     f"{t['snapshot_rows']:>11,}  {t['applied_offset'] or '-':<26} "
                     f"{_bytes(t['lag_bytes']):>9} {lag_s:>7}")
    for xid, start in (status.get("xa_held") or {}).items():
        lines.append(f"XA transaction {xid}: prepared at {start}, held back until its XA "
                     f"COMMIT (silver gets its rows then, none if it rolls back)")
    for t in status["tables"]:
        lines += _semantics(t)
        if t.get("resnapshot"):
            lines.append(f"{t['name']}: re-snapshot since {t['resnapshot']['since']} "
                         f"({t['resnapshot']['reason']}); silver stays as it is until it is "
                         f"replaced")
        for reread in t.get("range_reread") or []:
            read = f"read, {reread['rows'] or 0:,} rows" if reread["read"] else "not read yet"
            lines.append(f"{t['name']}: range re-read where {reread['where']} ({read}); "
                         f"silver's rows in it are replaced by the next window")
    last = status["last_run"]
    if last:
        lines.append(f"last run {last['run_id']} at {last['started_at']}: {last['outcome']} "
                     f"({last['seconds']}s)" + (f": {last['error']}" if last.get("error") else ""))
    return "\n".join(lines)


def _semantics(table: dict) -> list[str]:
    """What silver holds beside the source's live rows, on purpose (lake/semantics.py)."""
    lines = []
    if table.get("deletes") == "soft":
        count = table.get("soft_deleted_rows")
        lines.append(f"{table['name']}: soft deletes, "
                     f"{'?' if count is None else format(count, ',')} rows flagged "
                     f"_cdc_deleted (verify compares the live rows)")
    if table.get("skip"):
        lines.append(f"{table['name']}: skips {', '.join(table['skip'])}: rows they removed at "
                     f"the source stay in silver (verify counts them as kept)")
    return lines


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
