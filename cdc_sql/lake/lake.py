"""The lake of one pipeline: its engine, its root, who carries out table operations, and where
every table lives under the root (docs/architecture.md, "Layout").

    <root>/bronze/_snapshot/<db>.<table>   split rows
    <root>/bronze/_changes/<db>.<table>    typed change rows of one source table
    <root>/bronze/_binlog                  DDL and TRUNCATE statements of the captured tables
    <root>/silver/<name>, <name>_history   what users read
    <root>/_staging/<name>                 a batch's last change per key, before its MERGE
    <root>/_first/<name>                   silver's first files spliced during the snapshot
                                           (removed once silver exists)
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

from cdc_sql.config import layout
from cdc_sql.lake.delta_rs_tables import DeltaRsTables, version_files
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
    new tables and a user may turn on for silver) goes through the engine's Spark SQL, and so
    does a read of its rows (delta-rs reads no deletion vectors, and reads columns added under
    column mapping as NULLs). Reads of its log stay with delta-rs (but for the columns Delta
    clusters a table by, which only a table with the clustering feature has). Liquid
    clustering itself is the engine's alone (delta-rs cannot write it). Each table's features
    are said once."""

    ROUTED = ("add_columns", "reshape", "delete_rows", "update_rows", "compact_and_vacuum",
              "cluster", "replace_rows", "reset", "layout", "read_arrow")
    ENGINE = ("alter_clustering", "recluster")

    def __init__(self, tables: DeltaRsTables, engine):
        self._tables, self._spark, self._said = tables, SparkTables(engine), set()

    def unwritable(self, path: str) -> list[str]:
        features = self._tables.unwritable(path)
        if features and path not in self._said:
            self._said.add(path)
            log.info("%s asks for %s, which delta-rs cannot write: its MERGEs and changes go "
                     "through the engine", path, ", ".join(features))
        return features

    def merges_here(self, path: str) -> bool:
        return not self.unwritable(path)

    def set_properties(self, path: str, chosen: dict[str, str]) -> None:
        """By the engine where delta-rs cannot write the table, or where the properties turn
        deletion vectors on: delta-rs would give the table reader features of its own choosing
        with them (variantType, which Delta before 4.0 refuses to read)."""
        if self.unwritable(path) or layout.deletion_vectors(chosen):
            self._spark.set_properties(path, chosen)
        else:
            self._tables.set_properties(path, chosen)

    def __getattr__(self, name: str):
        if name in self.ENGINE:
            return getattr(self._spark, name)
        method = getattr(self._tables, name)
        if name not in self.ROUTED:
            return method

        def routed(path: str, *args, **kwargs):
            if not self.unwritable(path):
                return method(path, *args, **kwargs)
            return getattr(self._spark, name)(path, *args, **kwargs)

        return routed


class ReadsHere:
    """The engine's Spark SQL for an engine in another process (remote, active), except that
    the reads of a table's log (whether it exists, its version, history, schema, properties,
    layout but the columns Delta liquid-clusters it by) and the rows of a table asking for no
    feature delta-rs cannot handle go to delta-rs in this process, once the lake has been
    shown to be the engine's own: each is otherwise a Spark Connect round trip and a read of
    Delta's log on the server, and a window's silver step made 22 of them
    (docs/performance.md). Shown once: the engine and delta-rs find the same table id
    (Delta's metaData.id, drawn when the table was created) at the same path (`same_lake`).
    Writes stay with the engine, and a read delta-rs fails is asked of it."""

    READS = ("exists", "version", "history", "schema", "properties", "read_arrow", "layout")

    def __init__(self, engine):
        self._spark, self._here = SparkTables(engine), DeltaRsTables()
        self._shared: bool | None = None  # None: not known yet

    def __getattr__(self, name: str):
        method = getattr(self._spark, name)
        if name not in self.READS:
            return method

        def read(path: str, *args, **kwargs):
            if self.shared(path) and (name != "read_arrow" or not self._here.unwritable(path)):
                try:
                    return getattr(self._here, name)(path, *args, **kwargs)
                except Exception as exc:  # noqa: BLE001 - the engine reads what delta-rs cannot
                    log.debug("%s: %s by the engine (delta-rs: %s)", path, name, exc)
            return method(path, *args, **kwargs)

        return read

    def shared(self, path: str) -> bool:
        """Whether this process reads the engine's lake, found out at the first table read."""
        if self._shared is None:
            try:
                here = self._here.table_id(path)
            except Exception:  # noqa: BLE001 - not there, or not reachable from here
                here = None
            found = same_lake(here, self._spark.table_id(path))
            if found is not None:
                self._shared = found
                log.info("the lake's tables are read %s", "by delta-rs in this process (the "
                         "engine's own)" if found else "through the engine")
        return bool(self._shared)


def read_version(engine, path: str, version: int):
    """A table's rows as of `version`, read by the engine: with its own time travel where it
    has one; else (Sail 0.7 fails `VERSION AS OF` behind the table's last checkpoint, and it
    writes one every 10 commits) from the data files delta-rs lists for that version, read with
    that version's schema, and where those files are not its rows (deletion vectors, mapped
    columns or partitions, turned on by Delta Spark) by Sail's own time travel, which says so
    in one line where it cannot."""
    if not engine.time_travels:
        found = version_files(path, version)
        if found is not None:
            return engine.read_files(*found)
    return engine.read(path, version)


def same_lake(here: str | None, engine: str | None) -> bool | None:
    """Whether delta-rs in this process reads the engine's tables, from the id of one table
    as each sees it at the same path (None: cannot tell). A table only the engine has, or
    with another id (another machine's directory of that name), says no; a table neither has
    says nothing yet. Pure."""
    if here is None:
        return False if engine is not None else None
    return here == engine


def table_ops(engine, root: str) -> TableOps:
    chosen = tables.choose(engine.mode, root)
    if chosen == "delta-rs":
        return WithFallback(DeltaRsTables(), engine)  # type: ignore[return-value]
    if chosen == "reads-here" and engine.describes_history:
        return ReadsHere(engine)  # type: ignore[return-value]
    return SparkTables(engine)
