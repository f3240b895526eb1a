"""Snapshot splits: contiguous primary-key ranges [lower, upper) that cover every key value.

The first split is open below and the last open above, so a key inserted later, anywhere, still
falls in exactly one split. Bounds are compared by MySQL itself (row constructors in the split's
WHERE), so string keys follow the column's collation and composite keys their index order.
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections import Counter
from dataclasses import dataclass, replace

from sqlglot import exp

from cdc_sql.source import predicates
from cdc_sql.source.schema import SourceTable

_INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "bigint"}


@dataclass(frozen=True)
class Split:
    source_table: str            # db.table
    split_id: int
    lower: tuple | None          # inclusive; None = open below
    upper: tuple | None          # exclusive; None = open above
    # A range re-read (`cdc-sql resnapshot --where`): the rows matching this checked MySQL
    # predicate (source/predicates.py) instead of a key range; read alone, never grouped.
    predicate: str = ""

    @property
    def name(self) -> str:
        return f"{self.source_table}#{self.split_id}"

    def to_json(self) -> dict:
        dump = lambda b: [_value_to_json(v) for v in b] if b is not None else None  # noqa: E731
        value = {"source_table": self.source_table, "split_id": self.split_id,
                 "lower": dump(self.lower), "upper": dump(self.upper)}
        return {**value, "predicate": self.predicate} if self.predicate else value

    @classmethod
    def from_json(cls, value: dict) -> "Split":
        load = lambda b: tuple(_value_from_json(v) for v in b) if b is not None else None  # noqa: E731
        return cls(value["source_table"], value["split_id"], load(value["lower"]),
                   load(value["upper"]), value.get("predicate") or "")

    @classmethod
    def union(cls, splits: list["Split"]) -> "Split":
        """The key range of consecutive splits (a range re-read is read alone)."""
        return cls(splits[0].source_table, splits[0].split_id, splits[0].lower, splits[-1].upper,
                   splits[0].predicate if len(splits) == 1 else "")

    def where(self, key_sql: list[str], literal=None) -> tuple[str, list]:
        """A MySQL predicate selecting this split's rows, with its parameters (or, given a
        `literal` escaping function, with the bounds inlined and no parameters)."""
        if self.predicate:
            return predicates.bound(self.predicate, "mysql", lambda _: "%s", literal,
                                    percent_doubled=literal is None)
        row = f"({', '.join(key_sql)})" if len(key_sql) > 1 else key_sql[0]
        parts, args = [], []
        for op, bound in ((">=", self.lower), ("<", self.upper)):
            if bound is None:
                continue
            items = [literal(v) for v in bound] if literal else ["%s"] * len(bound)
            parts.append(f"{row} {op} " + (f"({', '.join(items)})" if len(items) > 1 else items[0]))
            args.extend([] if literal else bound)
        return (" AND ".join(parts) or "TRUE"), args


_TAGS = {"decimal": decimal.Decimal, "datetime": dt.datetime.fromisoformat,
         "date": dt.date.fromisoformat, "base64": base64.b64decode,
         "timedelta": lambda us: dt.timedelta(microseconds=us)}


def _value_to_json(value):
    """Key values in state JSON, keeping their type (the split SELECT binds them back)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, (bytes, bytearray)):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dt.timedelta):
        return {"timedelta": value // dt.timedelta(microseconds=1)}
    if isinstance(value, float):
        return value
    raise TypeError(f"cannot keep a key value of type {type(value).__name__} in state")


def _value_from_json(value):
    if isinstance(value, dict):
        ((tag, text),) = value.items()
        return _TAGS[tag](text)
    return value


def mysql_quote(name: str) -> str:
    """A MySQL identifier, quoted by sqlglot (backticks, inner ones doubled)."""
    return exp.to_identifier(name, quoted=True).sql(dialect="mysql")


def bound_quote(name: str) -> str:
    """`mysql_quote` for SQL whose values pymysql binds into `%s`: the name's own `%` doubled,
    or the binding reads it as a placeholder (a table named `per%cent`)."""
    return mysql_quote(name).replace("%", "%%")


SPLIT_BYTES = 64 * 2**20        # an automatic split holds about this much row data
MIN_SPLIT_ROWS, MAX_SPLIT_ROWS = 10_000, 4_000_000
GROUP_ROWS = 1_000_000           # a reader reads consecutive splits up to this many rows at once
GROUP_SPLITS = 64                # ... and at most this many (one CASE branch each)
_EXACT_COUNT_BELOW = 1_000_000   # tables estimated smaller are counted exactly


def split_rows(estimated_rows: int, row_bytes: int, parallelism: int) -> int:
    """Rows per split when `chunk_size` is 0: about SPLIT_BYTES of rows, and small enough that
    every one of `parallelism` readers gets a split of a large table."""
    by_size = SPLIT_BYTES // max(row_bytes, 1)
    by_readers = -(-estimated_rows // (2 * parallelism))
    return max(MIN_SPLIT_ROWS, min(by_size, by_readers, MAX_SPLIT_ROWS))


@dataclass(frozen=True)
class SplitGroup:
    """Consecutive splits of one table that one reader reads together (`group_splits`): one
    consistent read, one query, one bronze commit."""

    table: SourceTable
    splits: list[Split]
    rows: int | None = None  # about how many rows the group holds (None: not known)
    row_bytes: int | None = None  # about how many bytes a row holds, by the catalog
    creates: bool = False  # its commit creates bronze's snapshot table (`creating_groups`)


def group_splits(splits: list[Split], estimated_rows: int, parallelism: int) -> list[list[Split]]:
    """Consecutive pending splits of one table, in groups a reader reads in one consistent
    snapshot with one query and lands in one commit: the fixed cost of a read (connections, the
    watermark, a Delta commit, a state commit) is paid per group, however small the splits."""
    if not splits:
        return []
    per_split = max(1, estimated_rows // max(len(splits), 1))
    size = max(1, min(GROUP_SPLITS, -(-GROUP_ROWS // per_split),
                      len(splits) // max(parallelism, 1)))  # a group for every reader
    ordered = sorted(splits, key=lambda s: s.split_id)
    groups, current = [], []
    for split in ordered:  # only neighbours share a group: their union is one key range
        if current and (len(current) >= size or current[-1].split_id + 1 != split.split_id
                        or split.predicate or current[-1].predicate):
            groups.append(current)
            current = []
        current.append(split)
    return groups + [current]


def creating_groups(groups: list[SplitGroup], present: set[str]) -> list[SplitGroup]:
    """The groups, each that is its table's only one, the table's bronze snapshot table not
    `present` (qualified names), marked as creating that table with its rows in one commit:
    a small table's first read costs one commit, not an empty table's and an append's.
    Tables read in several groups are created empty first, for their readers to append to
    side by side. Pure."""
    count = Counter(g.table.qualified for g in groups)
    return [replace(g, creates=True)
            if count[g.table.qualified] == 1 and g.table.qualified not in present else g
            for g in groups]


def table_size(cur, table: SourceTable) -> tuple[int, int]:
    """(estimated rows, average row bytes) from information_schema; small tables are counted."""
    cur.execute("SELECT COALESCE(TABLE_ROWS, 0), COALESCE(AVG_ROW_LENGTH, 0) FROM "
                "information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (table.db, table.name))
    row = cur.fetchone() or (0, 0)
    rows, row_bytes = int(row[0]), int(row[1]) or 100
    if rows < _EXACT_COUNT_BELOW:
        cur.execute(f"SELECT COUNT(*) FROM {mysql_quote(table.db)}.{mysql_quote(table.name)}")
        rows = cur.fetchone()[0]
    return rows, row_bytes


def plan_splits(cur, table: SourceTable, chunk_size: int, parallelism: int = 2,
                size: tuple[int, int] | None = None) -> list[Split]:
    """Even ranges by MIN/MAX arithmetic for dense integer keys, else by walking the key index.
    `chunk_size` 0: sized from the table (split_rows); `size`: its table_size, if read."""
    key = [mysql_quote(k) for k in table.key]
    source = f"{mysql_quote(table.db)}.{mysql_quote(table.name)}"
    count, row_bytes = size or table_size(cur, table)
    chunk_size = chunk_size or split_rows(count, row_bytes, parallelism)
    if count <= chunk_size:
        return [Split(table.qualified, 0, None, None)]
    boundaries: list[tuple]
    if len(key) == 1 and table.column(table.key[0]).data_type in _INTEGER_TYPES:
        cur.execute(f"SELECT MIN({key[0]}), MAX({key[0]}) FROM {source}")
        low, high = cur.fetchone()
        spread = high - low + 1
        if spread <= 2 * count:  # dense enough that equal ranges hold about equal rows
            step = max(1, -(-spread * chunk_size // count))
            boundaries = [(b,) for b in range(low + step, high + 1, step)]
            return _from_boundaries(table.qualified, boundaries)
    boundaries = _walk(cur, table, chunk_size)
    return _from_boundaries(table.qualified, boundaries)


def _walk(cur, table: SourceTable, chunk_size: int) -> list[tuple]:
    """Every chunk_size-th key in index order: `WHERE key > last ORDER BY key LIMIT n,1`
    (values bound: names quoted by `bound_quote`)."""
    key = [bound_quote(k) for k in table.key]
    source = f"{bound_quote(table.db)}.{bound_quote(table.name)}"
    columns, order = ", ".join(key), ", ".join(key)
    row = f"({columns})" if len(key) > 1 else columns
    marks = f"({', '.join(['%s'] * len(key))})" if len(key) > 1 else "%s"
    boundaries: list[tuple] = []
    cur.execute(f"SELECT {columns} FROM {source} ORDER BY {order} LIMIT %s, 1", (chunk_size,))
    found = cur.fetchone()
    while found is not None:
        boundaries.append(tuple(found))
        cur.execute(f"SELECT {columns} FROM {source} WHERE {row} > {marks} ORDER BY {order} "
                    f"LIMIT %s, 1", (*found, chunk_size - 1))
        found = cur.fetchone()
    return boundaries


def _from_boundaries(source_table: str, boundaries: list[tuple]) -> list[Split]:
    bounds = [None, *boundaries, None]
    return [Split(source_table, i, bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
