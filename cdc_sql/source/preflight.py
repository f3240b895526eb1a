"""What the source must offer before anything is written, checked by `validate` and by every
run: the tables and keys the pipeline names, binlog settings, grants, a free server_id; and what
`validate` tells besides: whether the binlog outlives the snapshot, and the grants to give.

The snapshot reads every table first; the binlog is read from the lowest split watermark only
after it. Binlog files the server purges in between are lost changes, so the retention must
cover the snapshot's duration, with room for a failed run to be retried.
"""
from __future__ import annotations

import datetime as dt
import re
import time
from dataclasses import dataclass, field

import pymysql

from cdc_sql.cascades import ForeignKey
from cdc_sql.errors import SourceError
from cdc_sql.source import mysql
from cdc_sql.source.offsets import Position
from cdc_sql.source.schema import SourceTable, read_tables
from cdc_sql.source.splits import mysql_quote
from cdc_sql.source.watermarks import binary_log_status

RETRY_ROOM_SECONDS = 3600  # a killed or failed snapshot run restarted within the hour
SAMPLE_ROWS = 20_000


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class SourceView:
    """What the source told us at the start of a run."""

    mariadb: bool
    tables: list[list[SourceTable]]   # per pipeline table, the source tables it matches
    end: Position                     # the binlog end when the run started
    first_binlog: Position
    warnings: list[str] = field(default_factory=list)
    end_seen_at: str = field(default_factory=now)  # when `end` was read
    server: str = ""   # its identity, and what its binlog file numbers get in offsets
    base: int = 0      # (source/failover.py); set by the run once it knows where it resumes
    foreign_keys: list[ForeignKey] = field(default_factory=list)  # cascading, into captured
    gtids: bool = True  # transactions carry GTIDs (always on MariaDB; MySQL gtid_mode=ON)
    # The binlog end read just after the tables' definitions: they hold every DDL up to here
    # (partition layouts, source/binlog.py). Kept when `end` is moved on.
    read_at: Position | None = None

    @property
    def source_tables(self) -> list[SourceTable]:
        """Every captured source table once, however many pipeline tables read it (its bronze
        tables are created once: two creations of one table at once conflict on Delta Spark)."""
        return list({t.qualified: t for tables in self.tables for t in tables}.values())


def inspect_source(pipeline) -> SourceView:
    """Everything `validate` checks against a live source; raises with what to fix."""
    with mysql.cursor(pipeline.source) as cur:
        mariadb = mysql.is_mariadb(cur)
        warnings = check_binlog_settings(cur, pipeline.source.startup)
        if pipeline.source.startup != "snapshot-only":
            warnings += check_replication_access(cur, pipeline.source, mariadb)
        tables = read_tables(cur, pipeline.tables)
        foreign_keys = read_foreign_keys(cur, [t for found in tables for t in found])
        end, _ = binary_log_status(cur)
        cur.execute("SHOW BINARY LOGS")
        first_binlog = Position(cur.fetchone()[0], 4)
        gtids = True
        if not mariadb:
            cur.execute("SELECT @@global.gtid_mode")
            gtids = str(cur.fetchone()[0]).upper() == "ON"
            if not gtids:
                warnings.append("MySQL source without gtid_mode=ON: snapshot watermarks are "
                                "binlog positions, which group commit can make unsafe under "
                                "heavy writes; turn GTIDs on for exact watermarks")
    return SourceView(mariadb, tables, end, first_binlog, warnings,
                      foreign_keys=foreign_keys, gtids=gtids, read_at=end)


def read_foreign_keys(cur, tables: list[SourceTable]) -> list[ForeignKey]:
    """The cascading foreign keys of the captured tables: InnoDB carries them out without a
    binlog event (cdc_sql/cascades.py works out what they change). Their columns come from
    information_schema.KEY_COLUMN_USAGE, their rules from SHOW CREATE TABLE: MariaDB shows
    REFERENTIAL_CONSTRAINTS to a user with SELECT nothing (measured on 10.11)."""
    captured = {(t.db, t.name) for t in tables}
    if not captured:
        return []
    databases = sorted({db for db, _ in captured})
    cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, COLUMN_NAME, "
                "REFERENCED_TABLE_SCHEMA, REFERENCED_TABLE_NAME, REFERENCED_COLUMN_NAME "
                "FROM information_schema.KEY_COLUMN_USAGE WHERE REFERENCED_TABLE_NAME IS NOT "
                f"NULL AND TABLE_SCHEMA IN ({', '.join(['%s'] * len(databases))}) "
                "ORDER BY 1, 2, 3, ORDINAL_POSITION", databases)
    keys = [row for row in cur.fetchall() if (row[0], row[1]) in captured]
    collations = column_collations(cur, sorted({(db, child) for db, child, *_ in keys}))
    columns: dict[tuple, list] = {}
    for db, child, name, column, parent_db, parent, referenced in keys:
        if (db, child, column.lower()) in collations:
            found = columns.setdefault((db, child, name, parent_db, parent), [])
            found.append((column, referenced,
                          str(collations[db, child, column.lower()] or "").endswith("_ci")))
    rules = {}
    for db, child in sorted({(db, child) for db, child, *_ in columns}):
        cur.execute(f"SHOW CREATE TABLE {mysql_quote(db)}.{mysql_quote(child)}")
        rules[db, child] = constraint_rules(cur.fetchone()[1])
    out = []
    for (db, child, name, parent_db, parent), found in columns.items():
        on_update, on_delete = rules[db, child].get(name, ("RESTRICT", "RESTRICT"))
        out.append(ForeignKey(name, f"{db}.{child}", tuple(c for c, _, _ in found),
                              f"{parent_db}.{parent}", tuple(r for _, r, _ in found), on_update,
                              on_delete, tuple(f for _, _, f in found), (parent_db, parent)))
    return [fk for fk in out if fk.cascading]


def column_collations(cur, tables: list[tuple[str, str]]) -> dict[tuple, str | None]:
    """(db, table, column in lower case) -> its collation, of tables with foreign keys only:
    one query per table naming it (a join of KEY_COLUMN_USAGE with information_schema.COLUMNS
    opened every table of every database on the server, 12-15 ms of every run on an almost
    empty one). In lower case: column names compare in any case, as the join compared them."""
    found = {}
    for db, table in tables:
        cur.execute("SELECT COLUMN_NAME, COLLATION_NAME FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (db, table))
        found.update({(db, table, column.lower()): collation
                      for column, collation in cur.fetchall()})
    return found


_CONSTRAINT = re.compile(r"CONSTRAINT `((?:[^`]|``)+)` FOREIGN KEY .*")
_RULE = re.compile(r"ON (DELETE|UPDATE) (CASCADE|SET NULL|SET DEFAULT|RESTRICT|NO ACTION)")


def constraint_rules(create_table: str) -> dict[str, tuple[str, str]]:
    """Foreign key name -> (ON UPDATE, ON DELETE) rule, from SHOW CREATE TABLE (RESTRICT where
    the statement names none)."""
    found = {}
    for line in create_table.splitlines():
        match = _CONSTRAINT.search(line)
        if match:
            given = dict(_RULE.findall(line[line.rindex(")"):]))
            found[match.group(1).replace("``", "`")] = (given.get("UPDATE", "RESTRICT"),
                                                        given.get("DELETE", "RESTRICT"))
    return found


def check_binlog_settings(cur, startup: str) -> list[str]:
    found = mysql.variables(cur, "log_bin", "binlog_format", "binlog_row_image",
                            "binlog_row_metadata")
    needed = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}
    wrong = [f"{name}={found.get(name, 'unset')} (needs {value})"
             for name, value in needed.items() if found.get(name, "").upper() != value]
    if wrong and startup != "snapshot-only":
        raise SourceError("the source's binlog cannot feed CDC: " + ", ".join(wrong) +
                          ". Start the server with --log-bin --binlog-format=ROW "
                          "--binlog-row-image=FULL --binlog-row-metadata=FULL")
    if found.get("binlog_row_metadata", "FULL").upper() != "FULL":
        return ["binlog_row_metadata is not FULL: column names come from the current schema, "
                "which is wrong for events written before a column change"]
    return []


def check_replication_access(cur, source, mariadb: bool) -> list[str]:
    """Grants for reading the binlog, and no other replica using our server_id."""
    monitor = monitor_privilege(mariadb)
    grant = binlog_grant(source.user, mariadb)
    try:
        cur.execute("SHOW MASTER STATUS")
        cur.fetchall()
    except pymysql.err.OperationalError as exc:
        if exc.args[0] == 1227:
            raise SourceError(f"user {source.user} cannot read the binlog position (needs "
                              f"{monitor}); grant what cdc-sql needs: {grant}") from None
        raise
    cur.execute("SHOW GRANTS")
    statements = [row[0].upper() for row in cur.fetchall()]  # never shown: they hold hashes
    via_roles = any(s.startswith("GRANT `") and " ON " not in s for s in statements)
    if not via_roles and not any("REPLICATION SLAVE" in s or "ALL PRIVILEGES ON *.*" in s
                                 for s in statements):
        raise SourceError(f"user {source.user} lacks REPLICATION SLAVE, needed to read the "
                          f"binlog; grant what cdc-sql needs: {grant}")
    try:
        cur.execute("SHOW SLAVE HOSTS")
        hosts = cur.fetchall()
    except pymysql.err.OperationalError:
        return ["cannot list the source's replicas (needs REPLICATION MASTER ADMIN on MariaDB, "
                "REPLICATION SLAVE on MySQL), so source.server_id was not checked for clashes"]
    for row in hosts:
        if int(row[0]) == source.server_id:
            raise SourceError(
                f"source.server_id {source.server_id} is already used by a replica of the source "
                f"(host {row[1] or 'unknown'}); two binlog clients with one server_id cut each "
                f"other off: give each pipeline its own server_id")
    return []


def retention_seconds(found: dict[str, str]) -> int | None:
    """Seconds the server keeps binlog files, from its variables (lower-case names);
    None when it never purges them by age."""
    seconds = int(float(found.get("binlog_expire_logs_seconds", 0) or 0))
    days = float(found.get("expire_logs_days", 0) or 0)
    if seconds:
        return seconds
    return int(days * 86400) or None


def snapshot_estimate(rows: int, rows_per_second: float, parallelism: int) -> float:
    """Seconds a snapshot of `rows` rows takes with `parallelism` readers at the sampled rate."""
    return rows / max(rows_per_second * parallelism, 1.0)


def retention_warning(retention: int | None, rows: int, rows_per_second: float,
                      parallelism: int) -> str | None:
    if retention is None:
        return None
    estimate = snapshot_estimate(rows, rows_per_second, parallelism)
    needed = int(2 * estimate + RETRY_ROOM_SECONDS)
    if retention >= needed:
        return None
    return (f"binlog retention is {_duration(retention)} (binlog_expire_logs_seconds="
            f"{retention}), but the snapshot of about {rows:,} rows is estimated at "
            f"{_duration(estimate)} ({parallelism} readers at {rows_per_second:,.0f} rows/s each, "
            f"measured on a {SAMPLE_ROWS:,}-row sample read): the binlog written meanwhile could "
            f"be purged before capture reads it, which fails the run. Keep binlogs at least "
            f"{_duration(needed)}: SET GLOBAL binlog_expire_logs_seconds = {needed}, and the same "
            f"in the server's config so that a restart keeps it")


def check_retention(cur, tables: list[SourceTable], parallelism: int) -> list[str]:
    found = mysql.variables(cur, "binlog_expire_logs_seconds", "expire_logs_days")
    retention = retention_seconds(found)
    if retention is None or not tables:
        return []
    counts = {t: estimated_rows(cur, t) for t in tables}
    rate = sample_rate(cur, max(counts, key=counts.get))
    warning = retention_warning(retention, sum(counts.values()), rate, parallelism)
    return [warning] if warning else []


def estimated_rows(cur, table: SourceTable) -> int:
    cur.execute("SELECT COALESCE(TABLE_ROWS, 0) FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (table.db, table.name))
    row = cur.fetchone()
    return int(row[0]) if row else 0


def sample_rate(cur, table: SourceTable) -> float:
    """Rows per second one reader gets from this source: a timed read of the first rows."""
    started = time.perf_counter()
    cur.execute(f"SELECT * FROM {mysql_quote(table.db)}.{mysql_quote(table.name)} "
                f"LIMIT {SAMPLE_ROWS}")
    rows = len(cur.fetchall())
    seconds = time.perf_counter() - started
    return rows / seconds if rows >= 1000 and seconds > 0 else 100_000.0  # too few to time


def monitor_privilege(mariadb: bool) -> str:
    """The privilege that shows the binlog position (MariaDB renamed MySQL's)."""
    return "BINLOG MONITOR" if mariadb else "REPLICATION CLIENT"


def needed_grants(user: str, mariadb: bool, startup: str,
                  databases: list[str]) -> list[tuple[str, str]]:
    """(GRANT statement, what it is for): exactly what this pipeline uses."""
    monitor = monitor_privilege(mariadb)
    to = _grantee(user)
    grants = [(f"GRANT SELECT ON {mysql_quote(db)}.* {to}", "snapshot reads") for db in databases]
    if startup == "snapshot-only":
        return grants + [(f"GRANT {monitor} ON *.* {to}", "split watermarks")]
    grants.append((binlog_grant(user, mariadb), "the binlog and its position"))
    if mariadb:
        grants.append((f"GRANT REPLICATION MASTER ADMIN ON *.* {to}",
                       "optional: lets validate check that server_id is unused"))
    return grants


def binlog_grant(user: str, mariadb: bool) -> str:
    return f"GRANT REPLICATION SLAVE, {monitor_privilege(mariadb)} ON *.* {_grantee(user)}"


def _grantee(user: str) -> str:
    return f"TO '{user}'@'%'"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    hours, rest = divmod(seconds, 3600)
    if hours >= 48:
        return f"{hours / 24:.1f} days"
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"
