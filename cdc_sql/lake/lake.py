"""The lake of one pipeline: its engine, its root, who carries out table operations, and where
every table lives under the root (docs/architecture.md, "Layout").

    <root>/bronze/_snapshot/<db>.<table>   split rows
    <root>/bronze/_changes/<db>.<table>    typed change rows of one source table
    <root>/bronze/_binlog                  DDL and TRUNCATE statements of the captured tables
    <root>/silver/<name>, <name>_history   what users read
    <root>/_staging/<name>                 a batch's last change per key, before its MERGE
    <root>/_first/<name>                   silver's first files, written during the snapshot
    <root>/_state/checkpoint               the checkpoint (lake/state.py)

Source names become path components through `path_name`: letters, digits and `_` stay, every
other byte of the name's UTF-8 is written `-HH` (so `.` separates database and table
unambiguously, and quotes, brackets, `$`, `|`, `@`, `~` or non-ASCII letters never reach an
object store URL or a SQL path literal as they are: Sail percent-encodes some of them).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from cdc_sql.lake.delta_rs_tables import DeltaRsTables
from cdc_sql.lake.spark_tables import SparkTables
from cdc_sql.lake import tables
from cdc_sql.lake.tables import TableOps
from cdc_sql.location import Location

log = logging.getLogger("cdc_sql")
_SAFE = re.compile(rb"[A-Za-z0-9_]")


def path_name(name: str) -> str:
    """A source database or table name as one path component (reversible)."""
    return "".join(chr(b) if _SAFE.fullmatch(bytes([b])) else f"-{b:02X}"
                   for b in name.encode("utf-8"))


def source_dir(db: str, table: str) -> str:
    return f"{path_name(db)}.{path_name(table)}"


@dataclass(frozen=True)
class Lake:
    engine: object
    root: Location  # a str is taken too (cdc_sql/location.py)
    tables: TableOps = field(repr=False)
    sql_only: bool = False  # every silver window through the engine's SQL (engine.sql_only)

    def __post_init__(self):
        object.__setattr__(self, "root", Location.of(self.root))

    @classmethod
    def open(cls, engine, root: Location | str, sql_only: bool = False) -> "Lake":
        root = Location.of(root)
        return cls(engine, root, table_ops(engine, str(root)), sql_only)

    @property
    def spark(self):
        return self.engine.spark

    @property
    def clusters_liquid(self) -> bool:
        """Whether the engine has Delta's liquid clustering (config/layout.py liquid_columns);
        False for a lake opened without one (`cdc-sql plan`)."""
        return bool(getattr(self.engine, "clusters_liquid", False))

    @property
    def local(self) -> bool:
        return self.root.local

    # -- where tables live (as the text delta-rs and the engines take) -------------------------
    def _at(self, *parts: str) -> str:
        place = self.root
        for part in parts:
            place = place / part
        return str(place)

    @property
    def state_path(self) -> str:
        return self._at("_state", "checkpoint")

    def snapshot_path(self, db: str, table: str) -> str:
        return self._at("bronze", "_snapshot", source_dir(db, table))

    def changes_path(self, db: str, table: str) -> str:
        return self._at("bronze", "_changes", source_dir(db, table))

    @property
    def statements_path(self) -> str:
        return self._at("bronze", "_binlog")

    def silver_path(self, name: str) -> str:
        return self._at("silver", name)

    def history_path(self, name: str) -> str:
        return self._at("silver", f"{name}_history")

    def staging_path(self, name: str) -> str:
        return self._at("_staging", name)

    def first_version_path(self, name: str) -> str:
        return self._at("_first", name)


# -- who carries out table operations ---------------------------------------------------------
class WithFallback:
    """delta-rs's table operations, except that a change to a table asking for features
    delta-rs cannot write (deletion vectors or column mapping, which Databricks turns on for
    new tables and a user may turn on for silver) goes through the engine's Spark SQL. Reads
    stay with delta-rs, which reads those features (but for the columns Delta clusters a
    table by, which only a table with the clustering feature has). Liquid clustering itself is
    the engine's alone (delta-rs cannot write it). Each table's features are said once."""

    ROUTED = ("add_columns", "reshape", "delete_rows", "update_rows", "compact_and_vacuum",
              "cluster", "overwrite_arrow", "reset", "set_properties", "clustering")
    ENGINE = ("alter_clustering", "recluster")

    def __init__(self, tables: DeltaRsTables, engine):
        self._tables, self._engine, self._said = tables, engine, set()

    def unwritable(self, path: str) -> list[str]:
        features = self._tables.unwritable(path)
        if features and path not in self._said:
            self._said.add(path)
            log.info("%s asks for %s, which delta-rs cannot write: its MERGEs and changes go "
                     "through the engine", path, ", ".join(features))
        return features

    def merges_here(self, path: str) -> bool:
        return not self.unwritable(path)

    def __getattr__(self, name: str):
        if name in self.ENGINE:
            return getattr(SparkTables(self._engine), name)
        method = getattr(self._tables, name)
        if name not in self.ROUTED:
            return method

        def routed(path: str, *args, **kwargs):
            if not self.unwritable(path):
                return method(path, *args, **kwargs)
            return getattr(SparkTables(self._engine), name)(path, *args, **kwargs)

        return routed


def table_ops(engine, root: str) -> TableOps:
    if tables.choose(engine.mode, root) == "delta-rs":
        return WithFallback(DeltaRsTables(), engine)  # type: ignore[return-value]
    return SparkTables(engine)
