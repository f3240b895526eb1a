"""Source tables, their columns, keys, and the MySQL -> Spark type mapping (docs/types.md)."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from cdc_sql.config.model import matching
from cdc_sql.errors import SourceError
from cdc_sql.source.partitions import PARTITION_COLUMNS, Partitioning, partitioning

KEY_TEXT_PREFIX = "_cdc_key_"
_ARROW = {"BYTE": pa.int8(), "SHORT": pa.int16(), "INT": pa.int32(), "LONG": pa.int64(),
          "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "STRING": pa.string(),
          "BINARY": pa.binary(), "DATE": pa.date32(), "TIMESTAMP_NTZ": pa.timestamp("us"),
          "TIMESTAMP": pa.timestamp("us", tz="UTC")}


def arrow_type(spark_type: str) -> pa.DataType:
    """The Arrow type of a contract (Spark) type."""
    if spark_type.startswith("DECIMAL("):
        precision, scale = spark_type[8:-1].split(",")
        return pa.decimal128(int(precision), int(scale))
    return _ARROW[spark_type]


def key_text_name(column: str) -> str:
    """The column holding a temporal key column's MySQL text."""
    return KEY_TEXT_PREFIX + column


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str        # information_schema DATA_TYPE, lower case: int, varchar, ...
    column_type: str      # full COLUMN_TYPE: "int(10) unsigned", "set('a','b')", ...
    precision: int | None
    scale: int | None
    fsp: int | None       # fractional seconds digits of TIME/DATETIME/TIMESTAMP
    length: int | None    # character or byte length

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type.lower()

    @property
    def spark_type(self) -> str:
        return spark_type(self)

    @property
    def set_members(self) -> list[str]:
        """The members of an ENUM or SET, in definition order."""
        inner = self.column_type[self.column_type.index("(") + 1:self.column_type.rindex(")")]
        return [m.replace("''", "'") for m in re.findall(r"'((?:[^']|'')*)'", inner)]


@dataclass(frozen=True)
class SourceTable:
    db: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    key_nullable: bool = False  # a declared `primary_key:` may have NULLs; a real key has none
    partitioning: Partitioning | None = None
    # WITH SYSTEM VERSIONING: the column whose value tells a current row (its greatest value)
    # from a history row, and whether it is hidden (the implicit `row_end`, not a column of the
    # contract); "" for a table without versioning.
    row_end: str = ""
    row_end_hidden: bool = False
    # Where the key comes from: "" for the primary key, the name of the unique index on NOT
    # NULL columns used where there is none, or "declared" (the pipeline's `primary_key:`).
    key_index: str = ""

    @property
    def key_origin(self) -> str:
        """The key and where it comes from, as validate, plan and init say it."""
        columns = ", ".join(self.key)
        if self.key_index == "declared":
            return f"{columns} (declared primary_key: the table has no primary key)"
        if self.key_index:
            return (f"{columns} (the unique index `{self.key_index}` on NOT NULL columns: the "
                    f"table has no primary key)")
        return columns

    @property
    def qualified(self) -> str:
        return f"{self.db}.{self.name}"

    @property
    def key_text_columns(self) -> tuple[Column, ...]:
        """Key columns of temporal types: silver matches them by their MySQL text as well
        (`_cdc_key_<name>`), since zero dates are NULL in the typed column."""
        return tuple(c for c in self.columns if c.name in self.key and
                     c.data_type in ("date", "datetime", "timestamp"))

    @property
    def arrow_schema(self) -> pa.Schema:
        """A row in contract types, then the text of its temporal key columns."""
        return pa.schema([pa.field(c.name, arrow_type(c.spark_type)) for c in self.columns] +
                         [pa.field(key_text_name(c.name), pa.string())
                          for c in self.key_text_columns])

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)


GEOMETRY_TYPES = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
                  "multipolygon", "geometrycollection"}
_INTEGERS = {"tinyint": ("BYTE", "SHORT"), "smallint": ("SHORT", "INT"),
             "mediumint": ("INT", "INT"), "int": ("INT", "LONG"), "bigint": ("LONG", "DECIMAL(20,0)")}


def spark_type(c: Column) -> str:
    t = c.data_type
    if t in _INTEGERS:
        return _INTEGERS[t][1 if c.unsigned else 0]
    if t == "decimal":
        return f"DECIMAL({c.precision},{c.scale})" if c.precision <= 38 else "STRING"
    if t == "float":
        return "FLOAT"
    if t == "double":
        return "DOUBLE"
    if t == "bit":
        return "LONG" if (c.precision or 1) <= 63 else "BINARY"
    if t == "date":
        return "DATE"
    if t == "datetime":
        return "TIMESTAMP_NTZ"
    if t == "timestamp":
        return "TIMESTAMP"
    if t == "year":
        return "SHORT"
    if t in ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"):
        return "BINARY"
    if t in GEOMETRY_TYPES:
        return "BINARY"
    return "STRING"  # char, varchar, text, enum, set, json, time


# Tables whose rows cdc-sql captures: plain ones, and MariaDB's system-versioned ones (their
# current rows; the history rows the server writes beside them are left out).
TABLE_TYPES = "('BASE TABLE', 'SYSTEM VERSIONED')"


def read_tables(cur, table_specs: list) -> list[list[SourceTable]]:
    """Per pipeline table, every base table matching its `source`, with columns and key (the
    source's tables listed once; a schema the pipeline wants most tables of read whole)."""
    cur.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE FROM information_schema.TABLES WHERE "
        f"TABLE_TYPE IN {TABLE_TYPES} AND TABLE_SCHEMA NOT IN ('mysql', 'information_schema', "
        "'performance_schema', 'sys') ORDER BY TABLE_SCHEMA, TABLE_NAME")
    types = {(db, name): str(kind) for db, name, kind in cur.fetchall()}
    wanted = matching(table_specs, list(types))
    catalog = Catalog.read(cur, read_whole([t for names in wanted for t in names], list(types)))
    return [[read_table(cur, db, name, spec.primary_key, types[db, name], catalog)
             for db, name in names] for spec, names in zip(table_specs, wanted)]


def read_whole(wanted: list[tuple[str, str]], listed: list[tuple[str, str]]) -> set[str]:
    """The schemas whose tables' columns, keys and partitions are read in a query each, not
    a table at a time: those the pipeline wants at least half the tables of (a schema per
    tenant: 30,000 queries at 10,000 tables; a few tables of a schema of thousands are read
    on their own). Pure."""
    want, have = Counter(db for db, _ in set(wanted)), Counter(db for db, _ in listed)
    return {db for db, count in want.items() if 2 * count >= have[db]}


@dataclass(frozen=True)
class Catalog:
    """information_schema's rows of tables read ahead, whole schemas at once: columns, unique
    keys and partitions by (schema, table). A table of another schema is asked on its own."""

    schemas: frozenset[str] = frozenset()
    ahead: dict[str, dict[tuple[str, str], list]] = field(default_factory=dict)

    @classmethod
    def read(cls, cur, schemas: set[str]) -> "Catalog":
        if not schemas:
            return cls()
        names = tuple(sorted(schemas))
        where = f"TABLE_SCHEMA IN ({', '.join(['%s'] * len(names))})"
        return cls(frozenset(names), {kind: _rows(cur, kind, where, names) for kind in _QUERIES})

    def rows(self, cur, kind: str, db: str, name: str) -> list:
        """The table's rows of `kind` (_QUERIES), less the schema and table names."""
        found = self.ahead[kind] if db in self.schemas else \
            _rows(cur, kind, "TABLE_SCHEMA = %s AND TABLE_NAME = %s", (db, name))
        return found.get((db, name), [])


# Catalog's queries, for one table or whole schemas: each table's rows in the same order
# (rows of two names the collation holds equal may interleave: they are grouped by exact name).
_QUERIES = {
    "columns": "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, "
               "NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_MAXIMUM_LENGTH, "
               "IS_NULLABLE FROM information_schema.COLUMNS WHERE {where} "
               "ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
    "unique keys": "SELECT TABLE_SCHEMA, TABLE_NAME, INDEX_NAME, COLUMN_NAME FROM "
                   "information_schema.STATISTICS WHERE {where} AND NON_UNIQUE = 0 ORDER BY "
                   "TABLE_SCHEMA, TABLE_NAME, INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, "
                   "SEQ_IN_INDEX",
    "partitions": f"SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME, {PARTITION_COLUMNS} FROM "
                  "information_schema.PARTITIONS WHERE {where} AND PARTITION_NAME IS NOT NULL "
                  "ORDER BY TABLE_SCHEMA, TABLE_NAME, PARTITION_ORDINAL_POSITION",
}


def _rows(cur, kind: str, where: str, args: tuple) -> dict[tuple[str, str], list]:
    cur.execute(_QUERIES[kind].format(where=where), args)
    grouped: dict[tuple[str, str], list] = {}
    for db, name, *values in cur.fetchall():
        grouped.setdefault((db, name), []).append(tuple(values))
    return grouped


def read_table(cur, db: str, name: str, declared_key: list[str] | tuple[str, ...] = (),
               table_type: str | None = None, catalog: Catalog = Catalog()) -> SourceTable:
    """The table's columns and key (`table_type`: information_schema's, when the caller listed
    it already: a query less per table, 10,000 of them for a schema per tenant; `catalog`:
    its rows, when read ahead)."""
    rows = catalog.rows(cur, "columns", db, name)
    if not rows:
        raise SourceError(f"table {db}.{name} does not exist on the source")
    columns = tuple(
        Column(n, dt.lower(), ct, _int(p), _int(s), _int(f), _int(length))
        for n, dt, ct, p, s, f, length, _ in rows
    )
    nullable = {n for n, *_, is_null in rows if is_null == "YES"}
    found, index = _key(catalog.rows(cur, "unique keys", db, name), nullable)
    if index != "PRIMARY" and declared_key:  # what the pipeline says wins over an index
        found, index = tuple(declared_key), "declared"
    key = found
    if not key:
        raise SourceError(
            f"table {db}.{name} has no primary key and no unique NOT NULL key: declare the "
            f"columns that identify a row with `primary_key:` in its pipeline table entry")
    names = {c.name for c in columns}
    for column in key:
        if column not in names:
            raise SourceError(f"primary_key column `{column}` does not exist in {db}.{name}")
    row_end, hidden = _row_end(cur, db, name, table_type)
    if row_end and not hidden:  # the server adds a declared row end to the primary key
        key = tuple(k for k in key if k != row_end) or key
    return SourceTable(db, name, columns, key, bool(nullable.intersection(key)),
                       partitioning(catalog.rows(cur, "partitions", db, name)), row_end, hidden,
                       "" if index == "PRIMARY" else index)


_ROW_END = re.compile(r"^\s*`((?:[^`]|``)+)`[^\n]*\bGENERATED ALWAYS AS ROW END\b", re.I | re.M)


def _row_end(cur, db: str, name: str, table_type: str | None) -> tuple[str, bool]:
    """A system-versioned table's row end column and whether it is hidden (the implicit
    `row_end`); ("", False) for another table (`table_type` looked up when None)."""
    if table_type is None:
        cur.execute("SELECT TABLE_TYPE FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = %s", (db, name))
        found = cur.fetchone()
        table_type = str(found[0]) if found else ""
    if table_type.upper() != "SYSTEM VERSIONED":
        return "", False
    cur.execute(f"SHOW CREATE TABLE {_quoted(db)}.{_quoted(name)}")
    declared = _ROW_END.search(cur.fetchone()[1])
    return (declared.group(1).replace("``", "`"), False) if declared else ("row_end", True)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _key(unique: list, nullable: set[str]) -> tuple[tuple[str, ...], str]:
    """The PRIMARY key, else the first unique key whose columns are all NOT NULL (by index
    name), with the index's name; ((), "") when there is neither. `unique`: (index, column)
    rows, the PRIMARY key's first, then by index name, each index's columns in order
    (Catalog's "unique keys")."""
    indexes: dict[str, list[str]] = {}
    for index, column in unique:
        indexes.setdefault(index, []).append(column)
    for index, columns in indexes.items():
        if not nullable.intersection(columns):
            return tuple(columns), index
    return (), ""


def _int(value) -> int | None:
    return None if value is None else int(value)
