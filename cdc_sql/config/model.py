"""The pipeline model (docs/pipeline-yaml.md), checked key by key before anything is written.

Each dataclass field is one YAML key; its type hint and metadata (choices, minimum, secret) are the
rules. Unknown keys are errors, and every error names the file, the key path and the line.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
import stat
import types
import typing
import warnings
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from sqlglot import exp

from cdc_sql.config import layout
from cdc_sql.config.loader import Document, read_document
from cdc_sql.config.projection import parse_projection
from cdc_sql.config.startup import check_startup
from cdc_sql.errors import ConfigError, hide
from cdc_sql.location import Location, refused

SCHEMA_CHANGE_POLICIES = ("evolve", "resnapshot", "stop", "ignore_new_columns")
STARTUP_MODES = ("initial", "latest", "earliest", "timestamp", "offset", "gtid", "snapshot-only")
ENGINE_MODES = ("sail", "remote", "local", "active")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A literal db.table: plain names, or either part in backticks (`odd-db`.`we"ird|name`,
# backticks inside doubled); anything else is a regular expression over db.table names.
_NAME_PART = r"(`(?:[^`]|``)+`|[A-Za-z0-9_$]+)"
_LITERAL_SOURCE = re.compile(rf"{_NAME_PART}\.{_NAME_PART}")
# The shadow tables of online schema-change tools: gh-ost's _t_gho (the new table), _t_ghc (its
# changelog) and _t_del (the old table after the swap), pt-online-schema-change's _t_new and
# _t_old. A pattern source never matches them: their rows are copies, never the table's own.
SHADOW_TABLE = re.compile(r"_+.+_(gho|ghc|del|new|old)", re.S)
_IDENTIFIER_OR_EMPTY = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)?")
PASSWORD_FILE_BYTES = 64 * 2**10  # a password, not a file read forever (/dev/zero)
_LARGEST = 2**63 - 1  # whole numbers travel as 64-bit integers (Arrow, Spark, MySQL)


def _key(doc: str, default: Any = MISSING, **rules: Any) -> Any:
    """A YAML key: its one-line doc and its rules (choices, minimum, maximum, secret, pattern)."""
    if default is MISSING:
        return field(metadata={"doc": doc, **rules})
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc, **rules})
    return field(default=default, metadata={"doc": doc, **rules})


@dataclass(frozen=True)
class Tls:
    ca: str = _key("CA certificate file (PEM): TLS on, and the server's certificate checked "
                   "against it", "")
    cert: str = _key("client certificate file (PEM), for users created REQUIRE X509", "")
    key: str = _key("client private key file (PEM) of `cert`", "")
    verify_identity: bool = _key("also check that the certificate names source.host", False)
    required: bool = _key("TLS on without a CA (encrypted, server not verified)", False)

    @property
    def enabled(self) -> bool:
        return bool(self.required or self.ca or self.cert)

    def pymysql(self) -> dict | None:
        """pymysql's `ssl` argument (None: plain connection)."""
        if not self.enabled:
            return None
        chosen = {"ca": self.ca, "cert": self.cert, "key": self.key}
        return {**{k: v for k, v in chosen.items() if v},
                "check_hostname": bool(self.ca and self.verify_identity)}


@dataclass(frozen=True)
class Source:
    host: str = _key("MySQL/MariaDB host name or address")
    user: str = _key("user with SELECT, REPLICATION SLAVE and REPLICATION CLIENT grants")
    type: str = _key("source kind", "mysql", choices=("mysql",))
    port: int = _key("TCP port", 3306, minimum=1, maximum=65535)
    password: str = field(default="", repr=False,
                          metadata={"doc": "password; use ${VAR} to take it from the environment",
                                    "secret": True})
    password_file: str = _key("file holding the password (a mounted secret); instead of "
                              "`password`", "")
    ssl: Tls = _key("TLS to the source: {ca, cert, key, verify_identity, required}", Tls())
    server_id: int = _key("binlog client id, unique among the server's replicas", 5400,
                          minimum=1, maximum=2**32 - 1)
    startup: str = _key("where capture starts", "initial", choices=STARTUP_MODES)
    startup_timestamp: str = _key("for startup: timestamp, a UTC time (2024-05-01 12:00:00) or "
                                  "epoch seconds", "")
    startup_offset: str = _key("for startup: offset, a binlog file:position", "")
    startup_gtid: str = _key("for startup: gtid, where capture starts: after these "
                             "transactions (MariaDB: domain-server-seq per domain, as "
                             "@@gtid_binlog_pos; MySQL: a GTID set, as @@gtid_executed)", "")
    chunk_size: int = _key("rows per snapshot split; 0 (the default) sizes splits from the "
                           "table: about 64 MB of rows each, and enough for every reader", 0,
                           minimum=0)
    parallelism: int = _key("snapshot readers working at once", 2, minimum=1, maximum=64)
    binlog_batch_rows: int = _key("a bronze commit closes after this many changes, between "
                                  "transactions; a larger transaction lands in parts of this "
                                  "size, which silver sees only once it is whole", 50_000,
                                  minimum=1)
    binlog_batch_bytes: int = _key("... or after this many bytes of row images; a larger "
                                   "transaction lands in parts of this size too", 64 * 2**20,
                                   minimum=1)
    binlog_batch_seconds: float = _key("... or after this many seconds", 5.0, minimum=0)
    on_purged_binlog: str = _key("when the binlog capture needs was purged: stop (the run "
                                 "fails, saying so), or resnapshot (capture goes on from the "
                                 "oldest binlog, and the tables that needed the purged part "
                                 "are read again while the others carry on)", "stop",
                                 choices=("stop", "resnapshot"))
    snapshot_runner: str = _key("process: `parallelism` reader threads in this process; spark: "
                                "one Spark task per split, on the executors (a cluster reads "
                                "many splits at once; bronze must be reachable from them)",
                                "process", choices=("process", "spark"))
    snapshot_reader: str = _key("auto (binary where every column allows and the C decoders "
                                "are built, else native but pymysql over TLS; pymysql for "
                                "reads of 1,000 rows or fewer), binary (MySQL's binary "
                                "protocol, decoded in C), native (connectorx), or pymysql",
                                "auto", choices=("auto", "binary", "native", "pymysql"))
    verify_timeout_seconds: float = _key("`cdc-sql verify` reads the source in a read-only "
                                         "transaction whose statements stop after this many "
                                         "seconds", 600.0, minimum=0.001)


@dataclass(frozen=True)
class Target:
    path: str = _key("Delta root: bronze/, silver/ and _state/ live under it; a local path or "
                     "an s3://, abfss://, gs:// URL (credentials from the environment)")
    catalog: str = _key("catalog to register silver tables in by name (e.g. Unity Catalog "
                        "`main`); needs `schema`", "", pattern=_IDENTIFIER_OR_EMPTY)
    schema: str = _key("schema (database) to register silver tables in by name, e.g. `silver`: "
                       "then SELECT * FROM silver.<name> works in spark-sql", "",
                       pattern=_IDENTIFIER_OR_EMPTY)
    parallelism: int = _key("silver tables merged at once (small tables merged in this "
                            "process: at most 2, which only contend for Python's lock beyond; "
                            "500 or more in a pass: as many worker processes, at most one a "
                            "core)", 4, minimum=1, maximum=64)
    retention_hours: float = _key("`cdc-sql maintain` prunes bronze that every silver table has "
                                  "applied and that is older than this, and vacuums files older "
                                  "than this", 168.0, minimum=0)
    maintain_every_hours: float = _key("a run maintains the target itself (what `cdc-sql "
                                       "maintain` does, between two passes) once this many "
                                       "hours have passed since the last maintenance: a run "
                                       "following the binlog holds the lease `maintain` "
                                       "needs; 0: only `cdc-sql maintain` does", 24.0,
                                       minimum=0)
    change_data_feed: bool = _key("every silver and history table keeps Delta's change data "
                                  "feed (delta.enableChangeDataFeed): table_changes / "
                                  "readChangeFeed return each row's insert, update pre- and "
                                  "post-image and delete; needs Spark with Delta (not Sail "
                                  "0.7)", False)
    table_properties: dict[str, str] = _key("Delta table properties of every silver and history "
                                            "table (delta.logRetentionDuration...); a table's own "
                                            "`table_properties` win. Those cdc-sql relies on are "
                                            "refused, naming why", {})


@dataclass(frozen=True)
class EngineConfig:
    mode: str = _key("sail (embedded), remote (sc:// URL), local (JVM Spark + delta-spark), "
                     "active (the running SparkSession, e.g. Databricks)", "sail",
                     choices=ENGINE_MODES)
    url: str = _key("Spark Connect URL for mode remote", "")
    sql_only: bool = _key("every silver window through the engine's SQL MERGE INTO (the "
                          "reference path): no window merged in this process by delta-rs, no "
                          "first version made of bronze's files; the CLI's --sql-only "
                          "sets it", False)
    window_bytes: int = _key("when some table's windows go through the engine's SQL, a "
                             "capture pass ends at the first transaction's end past this "
                             "many bytes of row images (as source.binlog_batch_bytes counts "
                             "them), and its windows are merged before capture goes on: the "
                             "engine's memory follows a window's size, and a run far behind "
                             "the source would merge all of it at once; 0: no bound",
                             256 * 2**20, minimum=0)
    conf: dict[str, str] = _key("Spark settings (spark.*) for the JVM Spark cdc-sql starts "
                                "itself (mode local), e.g. a metastore for target.catalog "
                                "(docs/engines.md); a remote or active Spark has its own",
                                {}, key_pattern=re.compile(r"spark\.[A-Za-z0-9_.\-]+"))


@dataclass(frozen=True)
class History:
    """`history: {track: [...]}` or `{except: [...]}`: a version per change of chosen columns
    (Databricks AUTO CDC's TRACK HISTORY ON); `history: true` tracks every column."""

    track: list[str] = _key("only a change to one of these columns (or an insert or delete) "
                            "starts a new version; changes to the others update the current "
                            "version in place (its _cdc_offset/_cdc_ts say which change it "
                            "holds)", [])
    except_: list[str] = _key("... or: every column but these (updated_at, say) starts a new "
                              "version; instead of `track`", [], key="except")

    @property
    def columns(self) -> list[str]:
        return self.track or self.except_


@dataclass(frozen=True)
class Table:
    name: str = _key("silver table name: <target.path>/silver/<name>", pattern=_IDENTIFIER)
    source: str = _key("db.table (either name in backticks when it holds other characters "
                       "than letters, digits, _ and $), or a regular expression matching whole "
                       "db.table names")
    projection: str = _key("SELECT ... FROM <table> [WHERE ...], MySQL or Spark SQL", "")
    primary_key: list[str] = _key("key columns, for tables without a primary key", [])
    history: bool | History = _key(
        "also keep <name>_history: every version of every row (SCD type 2: valid_from/valid_to "
        "offsets and commit times, a current flag); or {track: [columns]} / {except: [columns]}: "
        "a new version only when a tracked column changes", False)
    exclude: str = _key("for a regular-expression source: a regular expression of whole "
                        "db.table names it leaves out (archives, copies)", "")
    exclude_columns: list[str] = _key("source columns `*` leaves out of silver (a wide table "
                                      "minus its PII columns); never a key column. A "
                                      "projection can say it too: SELECT * EXCEPT (a, b)", [])
    deletes: str = _key("hard: a deleted row leaves silver; soft: it stays, its last image "
                        "with _cdc_deleted = true at the delete's _cdc_offset/_cdc_ts, and an "
                        "insert of its key revives it (history is the same either way)",
                        "hard", choices=("hard", "soft"))
    skip: list[str] = _key("operations kept out of silver (bronze still holds them): delete "
                           "(a deleted row stays as it was), truncate (a TRUNCATE, or a "
                           "partition TRUNCATE or DROP, removes nothing); Debezium's "
                           "skipped.operations", [], item_choices=("delete", "truncate"))
    change_data_feed: bool = _key("this table (and its history) keeps Delta's change data "
                                  "feed, as target.change_data_feed does for every table", False)
    table_properties: dict[str, str] = _key("Delta table properties of this silver table and its "
                                            "history, over target.table_properties", {})
    cluster_by: list[str] = _key("silver (and history) columns the table's files are clustered "
                                 "by instead of the key: Delta liquid clustering (CLUSTER BY, "
                                 "every window through the engine) on Spark with Delta Lake, "
                                 "cdc-sql's Z-order on Sail; after a snapshot and in `cdc-sql "
                                 "maintain`. Filters on them read fewer files (a MERGE may "
                                 "rewrite more)", [])
    key_unique_across_shards: bool = _key("for a regex source: the key alone identifies a row "
                                          "across shards (else the key includes "
                                          "_cdc_source_table); a row moves between shards by a "
                                          "delete, then an insert", False)
    on_schema_change: str = _key(
        "what a DDL on its source does: evolve (columns added, widened, renamed; an "
        "incompatible change stops), resnapshot (an incompatible change reads the table again "
        "online), stop (any DDL stops the run), ignore_new_columns (added columns stay out of "
        "silver). Rows changed without row events (partition maintenance, statement-format "
        "DML) are read again online, unless stop", "evolve",
        choices=SCHEMA_CHANGE_POLICIES)

    @property
    def tracked(self) -> History | None:
        """The columns history tracks when chosen (None: every column, or no history)."""
        return self.history if isinstance(self.history, History) else None

    @property
    def is_pattern(self) -> bool:
        """Literal `db.table` (plain or backtick-quoted names) or a regular expression."""
        return not _LITERAL_SOURCE.fullmatch(self.source)

    def matches(self, db: str, table: str) -> bool:
        literal = self._literal_key
        if literal is not None:
            return literal == (db.lower(), table.lower())
        return source_pattern(self.source).fullmatch(f"{db}.{table}") is not None and \
            not SHADOW_TABLE.fullmatch(table) and \
            not (self.exclude and source_pattern(self.exclude).fullmatch(f"{db}.{table}"))

    @functools.cached_property
    def _literal_key(self) -> tuple[str, str] | None:
        parts = self.literal_parts
        return None if parts is None else (parts[0].lower(), parts[1].lower())

    @property
    def literal_parts(self) -> tuple[str, str] | None:
        """(db, table) of a literal source, backticks removed."""
        match = _LITERAL_SOURCE.fullmatch(self.source)
        if match is None:
            return None
        return tuple(p[1:-1].replace("``", "`") if p.startswith("`") else p  # type: ignore
                     for p in match.groups())


@functools.lru_cache(maxsize=1024)
def source_pattern(source: str) -> re.Pattern:
    """A source's regular expression, compiled once; Python's warnings about it (a nested set
    `[[`, which a later Python may read otherwise) are not the user's to see at every run."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return re.compile(source)


def matching(specs: list[Table], names: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Per pipeline table, the (db, table) names of `names` its source matches, in their
    order: literal sources by lookup (a thousand tables must not cost a million comparisons),
    patterns by their regular expression."""
    index: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for db, table in names:
        index.setdefault((db.lower(), table.lower()), []).append((db, table))
    return [index.get(spec._literal_key, []) if spec._literal_key is not None else
            [(db, table) for db, table in names if spec.matches(db, table)] for spec in specs]


@dataclass(frozen=True)
class Pipeline:
    name: str = _key("pipeline name", pattern=_IDENTIFIER)
    source: Source = _key("the MySQL/MariaDB source")
    target: Target = _key("the Delta lakehouse")
    tables: list[Table] = _key("tables to capture; each becomes one silver table")
    engine: EngineConfig = _key("Spark engine; the CLI's --engine overrides it", EngineConfig())
    file: str = field(default="", metadata={"internal": True}, compare=False)
    # what a person should know but need not stop for, each naming the file, line and key
    warnings: tuple[str, ...] = field(default=(), metadata={"internal": True}, compare=False)

    @property
    def root(self) -> Location:
        """The lake's root: a local directory or an object-store URL (never a pathlib.Path)."""
        return Location.of(self.target.path)

    def table(self, name: str) -> Table:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(name)


def load_pipeline(file: str | Path, environ: dict[str, str] | None = None,
                  offline: bool = False) -> Pipeline:
    """Parse and check a pipeline file without a database: keys, types, regexes, projections.
    `offline` (an analyst's pull-request check, where no secrets are): an unset variable or
    an unreadable password_file is a warning, and everything else is checked as always."""
    doc = read_document(file, environ, offline)
    pipeline = _build(Pipeline, doc.values, "", doc)
    pipeline = _replace_file(pipeline, str(file))
    notices = [str(doc.error(f"${{{name}}} is not set: not checked offline (a run needs it)",
                             path)) for path, name in doc.unset.items()]
    pipeline = _read_secrets(pipeline, doc, offline, notices)
    check_startup(pipeline, doc)
    _check_target(pipeline, doc)
    _check_tables(pipeline, doc)
    return dataclasses.replace(_with_target_layout(pipeline), warnings=tuple(notices))


def _replace_file(pipeline: Pipeline, file: str) -> Pipeline:
    target = pipeline.target
    root = Location.of(target.path)
    if root.local and not Path(root).is_absolute():
        # A relative target is relative to the pipeline file, so runs from any directory agree.
        root = Location.of((Path(file).resolve().parent / Path(root)).resolve())
    return dataclasses.replace(pipeline, file=file,
                               target=dataclasses.replace(target, path=str(root)))


def _read_secrets(pipeline: Pipeline, doc: Document, offline: bool,
                  notices: list[str]) -> Pipeline:
    """The password from `password_file`; TLS files resolved against the pipeline's folder.
    `notices` gathers the warnings (offline, a password file that cannot be read is one)."""
    source, base = pipeline.source, Path(pipeline.file).resolve().parent
    files = {}
    for key in ("ca", "cert", "key"):
        name = getattr(source.ssl, key)
        if name:
            files[key] = str(base / name)
            if not Path(files[key]).is_file():
                raise doc.error(f"no such file: {files[key]}", f"source.ssl.{key}")
    if bool(source.ssl.cert) != bool(source.ssl.key):
        raise doc.error("`cert` and `key` go together (the client certificate and its key)",
                        "source.ssl.cert" if not source.ssl.cert else "source.ssl.key")
    source = dataclasses.replace(source, ssl=dataclasses.replace(source.ssl, **files))
    if source.ssl.enabled and source.snapshot_reader == "native":
        raise doc.error("the native snapshot reader (connectorx) cannot use TLS files: use "
                        "snapshot_reader: auto or pymysql", "source.snapshot_reader")
    if source.password and "source.password" not in doc.interpolated | doc.unset.keys():
        raise doc.error("the password is written in the pipeline file itself (not shown): "
                        "take it from the environment (password: ${MYSQL_PASSWORD}) or from a "
                        "file (password_file: /run/secrets/mysql), so that the file holds no "
                        "secret", "source.password")
    if source.password_file:
        if source.password:
            raise doc.error("give `password` or `password_file`, not both",
                            "source.password_file")
        if "source.password_file" in doc.unset:
            return dataclasses.replace(pipeline, source=source)
        try:
            password = _password_from(base / source.password_file, doc, notices)
        except ConfigError as exc:
            if not offline:
                raise
            notices.append(f"{exc}: not checked offline (a run needs it)")
            return dataclasses.replace(pipeline, source=source)
        source = dataclasses.replace(source, password=password)
    return dataclasses.replace(pipeline, source=source)


def _password_from(path: Path, doc: Document, notices: list[str]) -> str:
    """A password file's text: UTF-8, at most PASSWORD_FILE_BYTES, its line break dropped; a
    file others may read is a warning (a mounted secret is the owner's alone)."""
    key = "source.password_file"
    try:
        with open(path, "rb") as stream:
            mode = os.fstat(stream.fileno()).st_mode
            data = stream.read(PASSWORD_FILE_BYTES + 1)
    except OSError as exc:
        raise doc.error(f"cannot read {path}: {exc.strerror}", key) from None
    if len(data) > PASSWORD_FILE_BYTES:
        raise doc.error(f"{path} is not a password file (more than "
                        f"{PASSWORD_FILE_BYTES // 1024} KB)", key)
    try:
        password = data.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError:
        raise doc.error(f"{path} is not UTF-8 text (a password file holds the password "
                        f"as text)", key) from None
    if stat.S_ISREG(mode) and mode & 0o077:
        notices.append(str(doc.error(
            f"{path} can be read by other users (mode {stat.S_IMODE(mode):04o}): make it "
            f"the owner's alone (chmod 600)", key)))
    hide(password, "***", minimum=4)
    return password


def _check_target(pipeline: Pipeline, doc: Document) -> None:
    problem = refused(pipeline.target.path)
    if problem is not None:
        raise doc.error(problem, "target.path")
    _check_properties(pipeline.target.table_properties, "target.table_properties", doc)
    if pipeline.target.catalog and not pipeline.target.schema:
        raise doc.error("`catalog` needs `schema` too (tables register as catalog.schema.name)",
                        "target.schema")


def _check_tables(pipeline: Pipeline, doc: Document) -> None:
    if not pipeline.tables:
        raise doc.error("list at least one table", "tables")
    seen: dict[str, int] = {}
    for i, table in enumerate(pipeline.tables):
        path = f"tables[{i}]"
        if table.name.lower() in seen:
            raise doc.error(f"table name `{table.name}` is used twice "
                            f"(also tables[{seen[table.name.lower()]}])",
                            f"{path}.name")
        seen[table.name.lower()] = i
    for i, table in enumerate(pipeline.tables):
        history = f"{table.name}_history".lower()
        if table.history and history in seen:
            raise doc.error(f"`history: true` keeps a table named {table.name}_history, which "
                            f"tables[{seen[history]}] already uses", f"tables[{i}].history")
    for i, table in enumerate(pipeline.tables):
        path = f"tables[{i}]"
        if table.is_pattern:
            try:
                source_pattern(table.source)
            except re.error as exc:
                raise doc.error(f"`{table.source}` is neither db.table nor a valid regular "
                                f"expression ({exc})", f"{path}.source") from None
            if "." not in table.source:
                raise doc.error(f"`{table.source}` must name db.table (a regular expression must "
                                f"match whole db.table names, e.g. shop\\.orders_[0-9]+)",
                                f"{path}.source")
        if table.key_unique_across_shards and not table.is_pattern:
            raise doc.error("`key_unique_across_shards` is for a regular-expression source "
                            "(shards); this source names one table", f"{path}.key_unique_across_shards")
        if table.projection:
            try:
                parse_projection(table.projection, table)
            except ConfigError as exc:
                raise doc.error(exc.detail, f"{path}.projection") from None
        _check_semantics(table, path, doc)
        _check_properties(table.table_properties, f"{path}.table_properties", doc)
        _check_cluster_by(table, path, doc)


def _check_properties(chosen: dict[str, str], path: str, doc: Document) -> None:
    for key in chosen:
        why = layout.refused_property(key)
        if why is not None:
            raise doc.error(f"table property `{key}` cannot be set here: {why}", f"{path}.{key}")


def _check_cluster_by(table: Table, path: str, doc: Document) -> None:
    """Listed once each; whether they are silver's columns is known with the source's
    (silver.plan.plan_silver)."""
    seen: set[str] = set()
    for n, column in enumerate(table.cluster_by):
        if column.lower() in seen:
            raise doc.error(f"`{column}` is listed twice", f"{path}.cluster_by[{n}]")
        seen.add(column.lower())


def _with_target_layout(pipeline: Pipeline) -> Pipeline:
    """Each table with the target's change data feed and table properties folded in (its own
    properties win), so that a table's spec says all of its layout."""
    target = pipeline.target
    return dataclasses.replace(pipeline, tables=[dataclasses.replace(
        table, change_data_feed=table.change_data_feed or target.change_data_feed,
        table_properties={**target.table_properties, **table.table_properties})
        for table in pipeline.tables])


def _check_semantics(table: Table, path: str, doc: Document) -> None:
    """exclude, exclude_columns, deletes and skip: what can be checked without the source."""
    if table.exclude:
        if not table.is_pattern:
            raise doc.error("`exclude` is for a regular-expression source; this source names "
                            "one table (remove `exclude`)", f"{path}.exclude")
        try:
            source_pattern(table.exclude)
        except re.error as exc:
            raise doc.error(f"`{table.exclude}` is not a valid regular expression ({exc})",
                            f"{path}.exclude") from None
    for n, operation in enumerate(table.skip):
        if operation in table.skip[:n]:
            raise doc.error(f"`{operation}` is listed twice", f"{path}.skip[{n}]")
    if table.deletes == "soft" and "delete" in table.skip:
        raise doc.error("`deletes: soft` keeps deleted rows flagged, `skip: [delete]` keeps them "
                        "unflagged: choose one", f"{path}.deletes")
    _check_history(table, path, doc)
    seen: set[str] = set()
    for n, column in enumerate(table.exclude_columns):
        if column.lower() in seen:
            raise doc.error(f"`{column}` is listed twice", f"{path}.exclude_columns[{n}]")
        seen.add(column.lower())
        if column.lower() in {k.lower() for k in table.primary_key}:
            raise doc.error(f"`{column}` is a key column (primary_key): silver rows are matched "
                            f"by it, so it cannot be left out", f"{path}.exclude_columns[{n}]")
    if table.exclude_columns and table.projection and \
            not parse_projection(table.projection, table).find(exp.Star):
        raise doc.error("exclude_columns leaves columns out of `*`, and the projection has no "
                        "`*`: leave the columns out of its list instead",
                        f"{path}.exclude_columns")


def _check_history(table: Table, path: str, doc: Document) -> None:
    """`history: {track: [...]}` or `{except: [...]}`, one of them, each column once. Whether
    the columns are silver's is known with the source's columns (silver/plan.py)."""
    tracked = table.tracked
    if tracked is None:
        return
    if tracked.track and tracked.except_:
        raise doc.error("give `track` (the columns whose changes start a version) or `except` "
                        "(every column but these), not both", f"{path}.history.except")
    if not tracked.columns:
        raise doc.error("list the columns to `track` (or those `except`ed), or write "
                        "`history: true` to track every column", f"{path}.history")
    key = "track" if tracked.track else "except"
    seen: set[str] = set()
    for n, column in enumerate(tracked.columns):
        if column.lower() in seen:
            raise doc.error(f"`{column}` is listed twice", f"{path}.history.{key}[{n}]")
        seen.add(column.lower())


def _build(cls: type, values: Any, path: str, doc: Document) -> Any:
    if not isinstance(values, dict):
        raise doc.error(f"expected a mapping of keys, got {_kind(values)}", path or "")
    hints, known = _keys(cls)
    unknown = sorted(set(values) - set(known))
    if unknown:
        where = f"{path}.{unknown[0]}" if path else unknown[0]
        raise doc.error(f"unknown key `{unknown[0]}`{_did_you_mean(unknown[0], known)}; "
                        f"the keys here are: {', '.join(known)}", where)
    kwargs = {}
    for name, spec in known.items():
        child = f"{path}.{name}" if path else name
        required = spec.default is MISSING and spec.default_factory is MISSING
        if name not in values:
            if required:
                raise doc.error(f"missing required key `{name}` ({spec.metadata['doc']})", child)
            continue
        if child in doc.unset:  # offline, its variable unset: the default, or its ${VAR} text
            if required:
                kwargs[spec.name] = values[name]
            continue
        kwargs[spec.name] = _convert(hints[spec.name], values[name], spec.metadata, child, doc)
        if required and kwargs[spec.name] in ("", []):
            raise doc.error(f"`{name}` must not be empty ({spec.metadata['doc']})", child)
    return cls(**kwargs)


@functools.cache
def _keys(cls: type) -> tuple[dict, dict[str, dataclasses.Field]]:
    """A model class's type hints and its fields by YAML key, worked out once (a pipeline of
    10,000 tables asked them 10,000 times: 2.4 s of a run)."""
    return typing.get_type_hints(cls), {yaml_key(f): f for f in fields(cls)
                                        if not f.metadata.get("internal")}


def yaml_key(spec: dataclasses.Field) -> str:
    """A field's key in the YAML file: its name, unless that is a Python word (`except`)."""
    return spec.metadata.get("key", spec.name)


def _did_you_mean(name: str, known) -> str:
    """`, did you mean `chunk_size`?` for a key that looks like a known one (case, typos)."""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower().replace("-", "_"), list(by_lower), n=1,
                                      cutoff=0.6)
    return f", did you mean `{by_lower[close[0]]}`?" if close else ""


def _convert(hint: Any, value: Any, rules: dict, path: str, doc: Document) -> Any:
    origin = typing.get_origin(hint)
    if origin is dict:
        return _mapping(hint, value, rules, path, doc)
    if origin is list:
        (item_hint,) = typing.get_args(hint)
        if not isinstance(value, list):
            raise doc.error(f"expected a list, got {_kind(value)}", path)
        item_rules = {"choices": rules["item_choices"]} if "item_choices" in rules else {}
        return [_convert(item_hint, item, item_rules, f"{path}[{i}]", doc)
                for i, item in enumerate(value)]
    if isinstance(hint, type) and hasattr(hint, "__dataclass_fields__"):
        return _build(hint, value, path, doc)
    if isinstance(hint, types.UnionType):  # true/false, or a mapping of finer choices
        chosen = [arg for arg in typing.get_args(hint) if arg is not bool]
        if isinstance(value, bool) and bool in typing.get_args(hint):
            return value
        if len(chosen) != 1 or not hasattr(chosen[0], "__dataclass_fields__"):
            raise TypeError(hint)
        if not isinstance(value, dict):
            keys = ", ".join(yaml_key(f) for f in fields(chosen[0]))
            raise doc.error(f"expected true, false or a mapping ({keys}), got {_kind(value)}",
                            path)
        return _build(chosen[0], value, path, doc)
    shown = "(hidden)" if rules.get("secret") else _shown(value, path, doc)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value.strip()):
                value = int(value)  # from ${VAR} interpolation
            else:
                raise doc.error(f"expected a whole number, got {shown}", path)
        if "minimum" in rules and value < rules["minimum"]:
            raise doc.error(f"must be at least {rules['minimum']}, got {shown}", path)
        if value > rules.get("maximum", _LARGEST):
            raise doc.error(f"must be at most {rules.get('maximum', _LARGEST)}, got {shown}",
                            path)
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(str(value))
            except ValueError:
                raise doc.error(f"expected a number, got {shown}", path) from None
        if not math.isfinite(value):  # .nan passes every comparison, .inf every minimum
            raise doc.error(f"expected a finite number, got {shown}", path)
        if "minimum" in rules and value < rules["minimum"]:
            raise doc.error(f"must be at least {rules['minimum']}, got {shown}", path)
        return float(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise doc.error(f"expected true or false, got {shown}", path)
        return value
    if hint is str:
        if value is None:
            value = ""
        if not isinstance(value, (str, list, dict)) and path in doc.texts:
            value = doc.texts[path]  # as written: a YAML timestamp, 0123, 1e3, yes
        if not isinstance(value, str):
            raise doc.error(f"expected text, got {_kind(value)}", path)
        if "choices" in rules and value not in rules["choices"]:
            raise doc.error(f"must be one of {', '.join(rules['choices'])}; got {shown}", path)
        if "pattern" in rules and not rules["pattern"].fullmatch(value):
            raise doc.error(f"{shown} is not a valid name (letters, digits and _, not starting "
                            f"with a digit)", path)
        return value
    raise TypeError(f"unsupported config type {hint}")


def _mapping(hint: Any, value: Any, rules: dict, path: str, doc: Document) -> dict:
    """A mapping of names to text (a table's properties, engine.conf): each name fits
    `key_pattern` where there is one, none names a secret, and each value is text as written
    (`true`, `30` and `8g` alike: Spark and Delta read their settings as text)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise doc.error(f"expected a mapping, got {_kind(value)}", path)
    out = {}
    for name, item in value.items():
        name, child = str(name), f"{path}.{name}"
        if "key_pattern" in rules and not rules["key_pattern"].fullmatch(name):
            raise doc.error(f"`{name[:60]}` is not a Spark setting (spark.<name>)", child)
        if re.search(r"password|secret|token|credential|access\.?key", name, re.I):
            raise doc.error(f"`{name}` holds a secret, which a pipeline file must not: give it "
                            f"to Spark itself (its spark-defaults.conf or hive-site.xml)", child)
        out[name] = _setting_text(item, child, doc)
    return out


def _setting_text(value: Any, path: str, doc: Document) -> str:
    if value is None or value == "" or isinstance(value, (list, dict)):
        raise doc.error(f"expected text, a number or true/false, got "
                        f"{_kind(value) if value != '' else 'nothing'}", path)
    if isinstance(value, bool) and path not in doc.texts:
        value = "true" if value else "false"
    return _convert(str, value, {}, path, doc)


def _shown(value: Any, path: str, doc: Document) -> str:
    """A value in a message: as the file wrote it when it came from the environment (the
    value itself is never repeated)."""
    if path in doc.interpolated:
        return f"{doc.texts[path]} (from the environment)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "true/false",
            type(None): "nothing"}.get(type(value), type(value).__name__)
