"""What a batch needs to know before its SQL can be written (`Facts`), read from the lake's
table metadata and the statements table by the lake's table reader (never the engine)."""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from cdc_sql.lake.lake import Lake
from cdc_sql.lake.silver.plan import SilverPlan
from cdc_sql.source import ddl
from cdc_sql.window import Window


@dataclass(frozen=True)
class Facts:
    """Read from the lake before a batch: per source table, the columns its bronze tables hold
    and the DDL/TRUNCATE statements in the window."""

    snapshot_columns: dict[str, dict] = field(default_factory=dict)  # name -> Arrow type
    changes_columns: dict[str, dict] = field(default_factory=dict)
    statements: dict[str, tuple] = field(default_factory=dict)  # (op, offset, ts, statement)
    silver_types: dict = field(default_factory=dict)  # silver's columns, when it exists

    @property
    def silver_columns(self) -> tuple[str, ...]:
        return tuple(self.silver_types)

    def dropped(self, plan: "SilverPlan") -> tuple[str, ...]:
        """Silver columns the source no longer has (NULL in rows changed from now on)."""
        return tuple(c for c in self.silver_columns
                     if c not in plan.columns and not c.startswith("_cdc_"))

    def renames(self, source: str) -> dict[str, list[tuple[str, str]]]:
        """Columns renamed in the window: new name -> [(earlier name, offset of the rename)],
        oldest first."""
        return renamed_columns(self.statements.get(source, ()))


STATEMENT_OPS = ("ddl", "truncate", "delete", "no_fk_checks")


class Statement(NamedTuple):
    """A row of bronze/_binlog as silver reads it (read_statements)."""

    db: str
    tbl: str
    op: str                # one of STATEMENT_OPS
    offset: str
    commit_ts: dt.datetime
    statement: str


def read_statements(lake: Lake) -> list[Statement]:
    """Every DDL statement and TRUNCATE bronze holds, and the rows events written with
    foreign_key_checks=0 (no cascade happened), in order, as (db, table, op, offset, commit
    time, statement): read once for all the tables of a merge, each of which takes those of
    its source tables in its window. Read by the lake's table reader, not a query: a run that
    merges every table in this process need not start the engine for it."""
    if not lake.tables.exists(lake.statements_path):
        return []
    rows = lake.tables.read_arrow(lake.statements_path,
                                  ["db", "tbl", "op", "offset", "commit_ts", "statement"])
    rows = rows.filter(pc.is_in(rows["op"], pa.array(STATEMENT_OPS))).sort_by("offset")
    return [Statement(**row) for row in rows.to_pylist()]


def read_facts(lake: Lake, plan: SilverPlan, window: Window,
               statements: list[Statement] | None = None) -> Facts:
    """What the window's SQL depends on; `statements` as read_statements gives them (read here
    when not given)."""
    if statements is None:
        statements = read_statements(lake)
    snapshot, changes, in_window = {}, {}, {}
    silver = lake.silver_path(plan.spec.name)
    silver_types = {f.name: f.type for f in lake.tables.schema(silver)} \
        if lake.tables.exists(silver) else {}
    for source in plan.sources:
        for found, path in ((snapshot, lake.snapshot_path(source.db, source.name)),
                            (changes, lake.changes_path(source.db, source.name))):
            if found is snapshot and window.splits is None:
                continue  # no snapshot rows in the window
            if lake.tables.exists(path):
                found[source.qualified] = {f.name: f.type for f in lake.tables.schema(path)}
        in_window[source.qualified] = tuple(
            (op, offset, ts, statement) for db, tbl, op, offset, ts, statement in statements
            if (db, tbl) == (source.db, source.name) and window.after < offset <= window.upto)
    return Facts(snapshot, changes, in_window, silver_types)


def renamed_columns(statements) -> dict[str, list[tuple[str, str]]]:
    """Columns a DDL renamed: new name -> [(earlier name, offset of that rename)], oldest
    first (a chain a -> b -> c gives c: [(a, R1), (b, R2)])."""
    earlier: dict[str, list[tuple[str, str]]] = {}
    for op, offset, _, statement in statements:
        for old, new in ddl.renamed_columns(statement) if op == "ddl" else []:
            earlier[new] = [*earlier.pop(old, []), (old, offset)]
    return earlier
