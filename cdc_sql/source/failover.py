"""Which server capture reads, and how it resumes there (docs/architecture.md, "Failover").

A binlog position means something on one server only. Capture records, with its position, the
server it read (`server_identity`) and the GTID position there. A run resumes by position only
on that server and only where the GTID position at the position is still the recorded one;
otherwise (a promoted replica, a name that moved to another server, a binlog reset) it resumes
by GTID: the server finds the place in its binlog itself and says where (MariaDB: an artificial
GTID_LIST event; MySQL, asked with the executed GTID set: the file it starts in), and the new
server's binlog files are numbered on from the old ones
(`file_base`), so offsets keep growing and silver stays exactly-once. A server that lacks
transactions capture already read, or a source without a recorded GTID position, stops the run
with what to do.

The decisions are pure functions of what state recorded and what the server says: `decide`
(by position or by GTID), `plan` (the whole `ResumePlan`: from where, by which, with which base),
`restart_base` (capture starting over on another server).
"""
from __future__ import annotations

from dataclasses import dataclass

from cdc_sql.errors import SourceError
from cdc_sql.source.gtid import GtidSet, MariaGtidState
from cdc_sql.source.offsets import Offset, Position, file_sequence

RESNAPSHOT = ("re-snapshot every table (cdc-sql resnapshot PIPELINE, then run): capture then starts "
              "over on this server while silver stays readable")


def server_identity(cur, mariadb: bool) -> str:
    """`server_id=N` on MariaDB (unique among a replication topology's servers), the server's
    UUID on MySQL."""
    if mariadb:
        cur.execute("SELECT @@global.server_id")
        return f"server_id={cur.fetchone()[0]}"
    cur.execute("SELECT @@global.server_uuid")
    return f"server_uuid={cur.fetchone()[0]}"


@dataclass(frozen=True)
class Resume:
    """How capture goes on: from its recorded position, or from its GTID position (`reason`
    says why, for the log)."""

    by_gtid: bool
    reason: str = ""


def gtids(text: str, mariadb: bool) -> MariaGtidState | GtidSet:
    """A recorded GTID position: MariaDB's last GTID per domain, MySQL's executed set."""
    return MariaGtidState.parse(text) if mariadb else GtidSet.parse(text)


def decide(recorded_server: str, recorded_gtid: str, position: str, server: str,
           gtid_here: str | None, mariadb: bool) -> Resume:
    """Resume at `position` only on the server that wrote it, where the GTID position there
    (`gtid_here`, None when not looked up) is the one recorded; else by GTID, where there is
    one to resume from."""
    same = not recorded_server or recorded_server == server
    if same and (gtid_here is None or not recorded_gtid or
                 gtids(gtid_here, mariadb) == gtids(recorded_gtid, mariadb)):
        return Resume(False)
    reason = (f"the source is now {server}, capture was reading {recorded_server}" if not same
              else f"the binlog at {position} is no longer where capture stopped (GTID "
                   f"position there {gtid_here or 'unknown'}, captured up to {recorded_gtid})")
    if not recorded_gtid:
        raise SourceError(f"cannot resume capture: {reason}, and binlog positions of one "
                          f"server mean nothing on another. No GTID position was recorded to "
                          f"resume from" + ("" if mariadb else " (a MySQL source needs "
                                            "gtid_mode=ON from the start of capture)") +
                          f"; {RESNAPSHOT}")
    return Resume(True, reason)


@dataclass(frozen=True)
class Recorded:
    """What state recorded of capture, as resuming needs it: the position (None before capture
    began), the server it is a place on ('' in a state older than failover) and the GTID
    position there."""

    position: Position | None = None
    server: str = ""
    gtid: str = ""


@dataclass(frozen=True)
class ResumePlan:
    """How capture goes on in this run: by GTID or by position (`resume`), from the recorded
    `position` (None: capture has not begun), this server's binlog files numbered `base` on in
    offsets."""

    resume: Resume = Resume(False)
    position: Position | None = None
    base: int = 0

    def by_gtid(self, position: str | None) -> bool:
        """By GTID until a place on this server is recorded (`position`, the recorded position
        now, moves on)."""
        return self.resume.by_gtid and self.position is not None and \
            position == str(self.position)


def wants_gtid_here(recorded: Recorded, server: str, first_file: str) -> bool:
    """Whether the GTID position at the recorded position is worth asking this server: only on
    the server that wrote it, in a binlog it still has (a purged file says purged, not another
    binlog), and with a recorded GTID position to compare it with."""
    return recorded.position is not None and bool(recorded.gtid) and \
        recorded.server in ("", server) and \
        file_sequence(recorded.position.file) >= file_sequence(first_file)


def plan(recorded: Recorded, server: str, first_file: str, gtid_here: str | None,
         snapshot_servers: frozenset[str], mariadb: bool) -> ResumePlan:
    """How capture resumes on `server`, whose oldest binlog is `first_file`: where capture has
    begun, `decide`, and by GTID the new server's files numbered on from the recorded offset
    (`file_base`); where it has not, the snapshot's watermarks (read on `snapshot_servers`)
    must be places on this server."""
    if recorded.position is None:
        others = sorted(snapshot_servers - {"", server})
        if others:
            raise SourceError(
                f"the snapshot was read on {', '.join(others)}, but the source is now "
                f"{server}: the snapshot's binlog watermarks mean nothing there and "
                f"capture has not begun: {RESNAPSHOT}")
        return ResumePlan()
    resume = decide(recorded.server, recorded.gtid, str(recorded.position), server, gtid_here,
                    mariadb)
    base = file_base(recorded.position.offset, first_file) if resume.by_gtid \
        else recorded.position.base
    return ResumePlan(resume, recorded.position, base)


def restart_base(read: list[Offset], first_file: str) -> int:
    """The base of a server capture starts over on: its offsets follow every one read before
    (capture's, or the snapshot's watermarks)."""
    return file_base(max(read), first_file) if read else 0


def missing(captured: str, server_has: str, mariadb: bool = True) -> list[str]:
    """The GTIDs of `captured` that a server whose binlog reaches `server_has` does not have:
    MariaDB per replication domain (positions, its @@gtid_binlog_pos), MySQL as a set (its
    @@gtid_executed)."""
    if not mariadb:
        lacking = GtidSet.parse(captured) - GtidSet.parse(server_has)
        return [f"{uuid}:{low}" if low == high else f"{uuid}:{low}-{high}"
                for uuid, ranges in lacking.intervals.items() for low, high in ranges]
    has = {domain: seq for domain, _, seq in MariaGtidState.parse(server_has).last}
    return [f"{domain}-{server}-{seq}" for domain, server, seq in MariaGtidState.parse(captured).last
            if has.get(domain, -1) < seq]


def check_not_behind(captured: str, server_has: str, server: str, mariadb: bool = True) -> None:
    lacking = missing(captured, server_has, mariadb)
    if lacking:
        raise SourceError(
            f"the source ({server}) lacks transactions capture already read into bronze: "
            f"captured up to {captured}, but its binlog only reaches {server_has or 'nothing'} "
            f"(missing {', '.join(lacking)}). It was behind when it took over: silver holds "
            f"changes this server never had. Point the pipeline at a server that has them, or "
            f"{RESNAPSHOT}")


def readiness(mariadb: bool, variables: dict) -> str:
    """What `validate` says about failover, from the server's variables (log_slave_updates or
    log_replica_updates; MariaDB gtid_strict_mode, MySQL gtid_mode)."""
    on = lambda name: str(variables.get(name, "")).upper() in ("ON", "1")  # noqa: E731
    if not mariadb and not on("gtid_mode"):
        return ("not possible: gtid_mode is not ON here, so when the source becomes another "
                "server capture stops with a message (turn GTIDs on before capture starts)")
    notes = [] if not mariadb or on("gtid_strict_mode") else [
        "gtid_strict_mode=OFF here: turn it on so a diverged replica is refused, not read"]
    if not (on("log_slave_updates") or on("log_replica_updates")):
        notes.append("log_slave_updates=OFF here: every server that may take over needs it ON "
                     "so its binlog holds the replicated transactions")
    return "possible by GTID (a replica that takes over must run with log_slave_updates=ON)" + \
        ("; " + "; ".join(notes) if notes else "")


def file_base(captured: Offset, first_file: str) -> int:
    """What to add to a new server's binlog file numbers so that every offset there follows
    `captured`, the last offset read on the old server."""
    return max(0, captured.file_seq + 1 - file_sequence(first_file))
