"""The binlog reader's statements: DDL on captured tables (carried out, or the table read again
by its `on_schema_change`), and statements that change rows without row events (partition
maintenance, DML logged as a statement) (source/binlog.py)."""
from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass

import pymysql

from cdc_sql.config.model import SHADOW_TABLE
from cdc_sql.errors import SourceError
from cdc_sql.source import binlog_events as ev
from cdc_sql.source import ddl
from cdc_sql.source.binlog_rows import CapturedStatement
from cdc_sql.source.binlog_xa import Held
from cdc_sql.source.offsets import Offset, Position, file_sequence
from cdc_sql.source.schema import SourceTable, read_table

log = logging.getLogger("cdc_sql.source.binlog")
_UTC = dt.timezone.utc

STOPPED = ("Its pipeline table has on_schema_change: stop. To go on, re-snapshot it (cdc-sql "
           "resnapshot PIPELINE --tables <name>) or choose another on_schema_change")


@dataclass(frozen=True)
class Bypass:
    """Rows of a captured table changed without row events (partition maintenance, DML
    written as a statement, an XA transaction prepared before capture began): the table must
    be read again (or the run stop, by its policy). `offset`: where capture met it."""

    table: str
    reason: str
    offset: str


class DdlEvents:
    """BinlogReader's query events and DDL."""

    def _query(self, event) -> str | None:  # noqa: C901 - one branch per statement kind
        query = ev.parse_query(event.body, event.type)
        statement = ddl.without_comments(query.statement)  # what it does, comments aside
        kind = "dml" if event.type == ev.EXECUTE_LOAD_QUERY else ddl.statement_kind(statement)
        if kind in ("begin", "savepoint", "xa_end", "xa_prepare"):
            self.in_transaction = True
            return None
        if kind == "xa_start":  # MySQL writes it as a statement (MariaDB: in the GTID event)
            self.in_transaction = True
            self._xa = Held(self._txn_start, self._gtid)
            return None
        if kind == "xa_commit":  # of a prepared one, or of this one (ONE PHASE)
            xid = ddl.xa_id(statement)
            self._xa_commit(self.held.pop(xid, None) or self._xa, xid, event)
            return self._commit(event)
        if kind == "xa_rollback":
            self.held.pop(ddl.xa_id(statement), None)
            return self._commit(event)
        if kind in ("commit", "rollback"):
            return self._commit(event)
        if kind == "dml":  # written as a statement: the rows it changed are not in the binlog
            self._statement_dml(query, statement)
            return self._commit(event) if self._standalone or not self.in_transaction else None
        moves = ddl.renames(statement, query.schema or "")
        if moves is not None:
            return self._renamed(moves, query, event)
        change = ddl.partition_change(statement, query.schema or "")
        if change is not None:
            return self._partition(change, query, event)
        return self._statement_ddl(query, event, self._captured_in(query.schema, statement))

    def _renamed(self, moves, query: ev.Query, event) -> str | None:
        """RENAME TABLE. A captured name that another table takes (renamed in, or the swap of
        an online schema-change tool: t TO _t_del, _t_gho TO t) holds rows capture never saw
        under it: read again. A captured table renamed to a name its pipeline table also
        matches (a pattern) is followed: its silver table is read again (its rows under the
        old name go), the new name is snapshotted. Renamed to a name the pipeline does not
        capture (nor a tool's shadow name): the run stops, saying what to do."""
        captured = {(db.lower(), t.lower()): (db, t) for db, t in self.tables}
        offset = Offset(self._seq(), self.event_position.pos, 0)
        touched, again, new = set(), [], set()
        for old, to in moves:
            if old in captured:
                table = captured[old]
                touched.add(table)
                dropped = self.drop.get(table)
                followed = self._matches(*to)
                if not followed and not SHADOW_TABLE.fullmatch(to[1]) and \
                        (dropped is None or offset > dropped) and \
                        self.policy.on_change(*table) != "stop":
                    raise SourceError(
                        f"{table[0]}.{table[1]} was renamed to {to[0]}.{to[1]} at binlog "
                        f"{self.event_position}: the pipeline does not capture that name, and "
                        f"silver keeps the rows it had. Name {to[0]}.{to[1]} in the pipeline (or "
                        f"rename the table back), then re-snapshot it: cdc-sql resnapshot "
                        f"PIPELINE --tables <name>")
                if followed:
                    again.append(table)
            if to in captured:
                touched.add(captured[to])
                again.append(captured[to])
            elif self._matches(*to):
                new.add(to)
        self._policies(query, touched)
        if again:
            self._bypass(sorted(set(again)), "RENAME TABLE gave the name another table's rows "
                                             "(or the table another name the pipeline "
                                             "captures)")
        return self._statement_ddl(query, event, touched | new)

    def _statement_ddl(self, query: ev.Query, event, touched: set[tuple[str, str]],
                       op: str = "", stop: bool = True, where: list | None = None,
                       row_of: tuple[str, str] | None = None) -> str | None:
        """A DDL statement (or another statement logged as a statement): a transaction of its
        own. Kept in bronze when it may concern a captured table (as `op`, for the table
        `row_of`, with `where`: _ddl); after one that touches a captured table the pass ends
        (`stop`), so the next one reads the new definitions."""
        self._policies(query, {t for t in touched if t in self.tables})
        landed = self.skip.get(("", ""))  # statements bronze already holds
        if touched and (landed is None or  # only the captured tables' statements are kept
                        (self._seq(), event.log_pos) > (landed.file_seq, landed.pos)):
            self._statements.append(self._ddl(query, event, {row_of} if row_of else touched,
                                              op, where))
        result = self._commit(event)
        if touched and stop:  # the next pass reads with the tables' new definitions
            self.schema_changed = sorted(f"{db}.{t}" for db, t in touched)
            return "ddl-stop"
        return result

    def _policies(self, query: ev.Query, tables: set[tuple[str, str]]) -> None:
        """A DDL that may change these captured tables, by their pipeline tables'
        `on_schema_change`: `stop` stops the run here; `resnapshot` reads the table again if
        its definition now is one silver cannot evolve to (another key, a type that is no
        widening); the others go on (the pass ends, and the next reads the definitions). An
        ALTER TABLE that changes values without row events (ddl.value_rewrites: a column added
        with a DEFAULT, say) reads the table again, as rows changed so do."""
        offset = Offset(self._seq(), self.event_position.pos, 0)
        statement = ddl.without_comments(query.statement)
        for db, table in sorted(tables):
            dropped = self.drop.get((db, table))
            if dropped is not None and offset <= dropped:
                continue  # a re-snapshot whose rows are read after this is under way
            policy = self.policy.on_change(db, table)
            if policy == "stop":
                verb = " ".join(query.statement.split(None, 2)[:2]).upper()
                raise SourceError(f"{db}.{table} at binlog {self.event_position}: a DDL statement "
                                  f"that may change it ({verb} ...). {STOPPED}")
            why = self._incompatible(self.tables[db, table]) if policy == "resnapshot" else ""
            if why:
                self._bypass([(db, table)], f"a DDL statement: {why}, which silver cannot "
                                            f"evolve to (on_schema_change: resnapshot)")
                continue
            rewrites = [r.why for r in ddl.value_rewrites(
                            statement, {c.name.lower(): c for c in self.tables[db, table].columns},
                            query.strict)
                        if not (r.added and policy == "ignore_new_columns")]
            if rewrites:
                self._bypass([(db, table)], f"an ALTER TABLE changes values without row "
                                            f"events: {'; '.join(rewrites)}")

    def _incompatible(self, table: SourceTable) -> str:
        """Why the table as now defined cannot be followed by evolving ("" if it can, or if
        the table is gone: the run then says so): its key changed, or bronze cannot take a
        column's new type."""
        try:
            with self._cursor() as cur:
                now = read_table(cur, table.db, table.name, table.key)
        except SourceError:
            return ""
        if tuple(now.key) != tuple(table.key):
            return f"its key changed from ({', '.join(table.key)}) to ({', '.join(now.key)})"
        return self.policy.cannot_follow(now)

    def _captured_in(self, schema: str, statement: str) -> set[tuple[str, str]]:
        """The captured tables (db, table) a DDL statement may change."""
        named = ddl.touched_tables(statement, schema or "")
        if named is None:
            return {key for key in self.tables if key[0] == schema}
        captured = {(db.lower(), t.lower()): (db, t) for db, t in self.tables}
        new_matches = {key for key in named if self._matches(*key) and key not in captured}
        return {captured[key] for key in named if key in captured} | new_matches

    def _ddl(self, query: ev.Query, event, touched: set[tuple[str, str]], op: str = "",
             where: list | None = None) -> CapturedStatement:
        """A statement's row in bronze/_binlog: `truncate`, `delete` (a partition's rows, the
        statement with the conditions that say which: lake/silver/execute.py) or `ddl`; the statement
        `redacted` (a DEFAULT or COMMENT may hold what the source's owner would not copy into a
        lake; silver needs only its structure: renames, truncates)."""
        truncated = len(touched) == 1 and ddl.is_truncate(query.statement)
        db, table = next(iter(touched)) if len(touched) == 1 else (query.schema, "")
        text = ddl.redacted(query.statement)  # its literals and comments are the source's
        statement = text if where is None else json.dumps({"statement": text, "where": where})
        return CapturedStatement(
            offset=Offset(self._seq(), event.log_pos, 0).text, db=db, tbl=table,
            op=op or ("truncate" if truncated else "ddl"), statement=statement,
            commit_ts=dt.datetime.fromtimestamp(event.timestamp, _UTC), gtid=self._gtid)


class PartitionEvents:
    """BinlogReader's statements that change rows without row events."""

    def _statement_dml(self, query: ev.Query, statement: str) -> None:
        """DML the source wrote as a statement (binlog_format STATEMENT or MIXED, LOAD DATA in
        statement form): its captured tables are read again (or the run stops)."""
        named = ddl.dml_targets(statement, query.schema or "")
        captured = {(db.lower(), t.lower()): (db, t) for db, t in self.tables}
        tables = [key for key in captured if named is None and key[0] == (query.schema or "")
                  .lower() or named is not None and key in named]
        verb = statement.split(None, 1)[0].upper() if statement else "DML"
        self._bypass([captured[key] for key in tables],
                     f"{verb} written as a statement (binlog_format STATEMENT or MIXED): its "
                     f"rows are not in the binlog")

    def _bypass(self, tables, reason: str) -> None:
        """Rows of these captured tables changed without row events."""
        offset = Offset(self._seq(), self.event_position.pos, 0)
        for db, table in tables:
            dropped = self.drop.get((db, table))
            if dropped is not None and offset <= dropped:
                continue  # a re-snapshot whose rows are read after this is under way
            where = f"{db}.{table} at binlog {self.event_position}"
            if self.policy.on_change(db, table) == "stop":
                raise SourceError(f"{where}: {reason}. {STOPPED}")
            log.warning("%s: %s; the table is read again (re-snapshot)", where, reason)
            self.bypassed.append(Bypass(f"{db}.{table}", reason, offset.text))

    def _partition(self, change: ddl.PartitionChange, query: ev.Query, event) -> str | None:
        """An ALTER TABLE on partitions. TRUNCATE, DROP and CONVERT PARTITION TO TABLE remove
        the partitions' rows without row events: silver removes them too where the partitions'
        ranges at that statement are known (op `delete`), else the table is read again;
        EXCHANGE swaps rows in unseen: read again. The others move rows between partitions
        and change no row: kept as DDL (the layout is read again)."""
        captured = {(db.lower(), t.lower()): (db, t) for db, t in self.tables}
        table = captured.get(change.table)
        other = captured.get(change.other) if change.other else None
        touched = {t for t in (table, other) if t is not None}
        new = {key for key in (change.table, change.other)
               if key and key not in captured and self._matches(*key)}
        if not change.changes_rows or not touched:
            return self._statement_ddl(query, event, touched | new)
        why = f"ALTER TABLE ... {change.action} PARTITION changes rows without row events"
        if change.action == "EXCHANGE":
            self._bypass(sorted(touched), why)
            return self._statement_ddl(query, event, set(), stop=False)
        if change.partitions == ("ALL",):
            return self._statement_ddl(query, event, {table}, op="truncate", stop=False)
        where = self._partition_rows(table, change.partitions)
        if where is None:
            self._bypass([table], why + ", and which rows the partitions held then cannot be "
                                        "told from here")
            return self._statement_ddl(query, event, {table} | new, op="ddl")
        log.info("binlog: %s.%s at %s: %s PARTITION %s, its rows removed from silver", *table,
                 self.event_position, change.action, ", ".join(change.partitions))
        # DROP and CONVERT change the layout: the pass ends, and the next reads it again
        return self._statement_ddl(query, event, {table} | new, "delete", where=where,
                                   stop=change.action != "TRUNCATE", row_of=table)

    def _partition_rows(self, table: tuple[str, str], names: tuple[str, ...]
                        ) -> list[list[tuple]] | None:
        """Conditions on the rows of these partitions, where the table's layout held by this
        reader is the one at this statement, and silver holds the column as it is."""
        source = self.tables[table]
        layout = source.partitioning
        if layout is None or layout.column is None or \
                not self.policy.carried(*table, layout.column):
            return None
        where = layout.rows_of(names)
        if where is None or not self._layout_current(table):
            return None
        return where

    def _layout_current(self, table: tuple[str, str]) -> bool:
        """The layout held was read just before `schema_at`; it is the one at this statement
        if that came after it (capture ends its pass at any DDL of the table, so none lies in
        between), or if no DDL that could touch the table lies between this statement and
        `schema_at` (the server's own list of its binlog events says)."""
        here = self.event_position
        if self.schema_at is None:
            return False
        if here.offset > self.schema_at.offset:
            return True
        return not ddl_between(self._cursor, [table], here, self.schema_at)


def ddl_between(cursor, tables, after: Position, upto: Position) -> bool:
    """Whether the source's binlog holds, after `after` and before `upto`, a DDL statement that
    may concern one of `tables` ((db, table) pairs: one that names it, or one that cannot be
    read, in its database), by the server's own list of its events (SHOW BINLOG EVENTS; no row
    is decoded). Any error counts as yes: the caller then does what is safe without knowing."""
    wanted = {(db.lower(), name.lower()) for db, name in tables}
    try:
        with cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            files = [r[0] for r in cur.fetchall()
                     if file_sequence(after.file) <= file_sequence(r[0]) <=
                     file_sequence(upto.file)]
            for file in files:
                pos = after.pos if file == after.file else 4
                while True:
                    cur.execute("SHOW BINLOG EVENTS IN %s FROM %s LIMIT 1000", (file, pos))
                    rows = cur.fetchall()
                    for _, at, kind, _, _, info in rows:
                        if file == upto.file and at >= upto.pos:
                            return False
                        if kind in ("Query", "Query_compressed") and \
                                _may_concern(str(info or ""), wanted):
                            return True
                    if len(rows) < 1000:
                        break
                    pos = rows[-1][4]
    except (SourceError, pymysql.err.MySQLError):
        return True
    return False


def _may_concern(info: str, tables: set[tuple[str, str]]) -> bool:
    """A SHOW BINLOG EVENTS query (`use `db`; statement`) is DDL that may change one of
    `tables` (lower-case (db, table) pairs)."""
    schema, statement = "", info
    if info.startswith("use `"):
        close = info.find("`; ")
        schema, statement = info[5:close].replace("``", "`"), info[close + 3:]
    statement = ddl.without_comments(statement)
    if ddl.statement_kind(statement) != "ddl":
        return False
    change = ddl.partition_change(statement, schema)
    named = {change.table, change.other} if change else ddl.touched_tables(statement, schema)
    if named is None:
        return any(db == schema.lower() for db, _ in tables)
    return any(key in tables for key in named)
