"""Where the lake's Delta tables live, and the one interface for what cdc-sql does to them.

`Location` (cdc_sql/location.py) tells a local path from an object store by its scheme, once,
for the whole target; `choose(engine_mode, path)` then picks who does the table operations:

| target.path                                    | sail, local (JVM)  | remote, active     |
|------------------------------------------------|--------------------|--------------------|
| a plain path, `file://`                        | delta-rs           | Spark SQL, reads * |
| `s3://`, `s3a://`, `gs://`, `az://`, `abfss://` ... (OBJECT_STORES) | delta-rs | Spark SQL, reads * |
| any other scheme (`dbfs:`, `hdfs://`, ...)     | Spark SQL          | Spark SQL          |

delta-rs runs in this process: it needs no trip through Spark Connect for the small, frequent
commits of bronze and state, and it does what Sail lacks (OPTIMIZE, VACUUM, history,
type changes: docs/engines.md). An engine in another process (remote, active) may not share
this machine's file system, so there every change goes through its own Spark SQL; * reads of
the tables' logs (and rows of cdc-sql's own tables) go to delta-rs once it has found the same
table there as the engine (`lake.ReadsHere`: a Delta Spark engine only). Data queries
(silver's MERGEs, reads) always run on the engine.

The implementations: `DeltaRsTables` (lake/delta_rs_tables.py) and `SparkTables`
(lake/spark_tables.py), chosen (or combined) by `lake.table_ops`. deltalake and pyspark are imported where
they are used: executors of snapshot tasks load these modules without a Spark session, and
`validate`/`status` without either.
"""
from __future__ import annotations

import decimal
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, ContextManager, Iterable, Protocol

import pyarrow as pa

from cdc_sql.lake.parquet_files import ROW_GROUP_ROWS
from cdc_sql.engine import in_process
from cdc_sql.location import Location
from cdc_sql.sql import quote, string_literal

log = logging.getLogger("cdc_sql")
TARGET_FILE_BYTES = 128 * 2**20  # silver files after clustering
EVOLVE_MARK = "cdc-sql: schema change"  # commit metadata of cdc-sql's own schema changes
RESNAPSHOT_MARK = "cdc-sql: re-snapshot"  # of a silver table replaced by a re-snapshot
# A MERGE whose conditions use cdc-sql's own guard columns is one of ours (Sail writes no commit
# metadata, but every engine records the MERGE's predicates).
OWN_MERGE = "cdc-sql: merge"
_OWN_MERGE_GUARDS = ("_cdc_offset", "_cdc_valid_from")
STATS_COLUMNS = 32  # Delta's default number of columns with file statistics
SMALL_APPEND = 2**20  # a list of batches of fewer bytes is appended by delta-rs's writer
# The tables a run commits to every few seconds for days (bronze, state) keep 10 seconds of
# their log past its last checkpoint, not Delta's 30 days: each commit lists the log (all of
# it on a local disk or Azure, which list from no offset), and nothing reads these tables at
# an earlier version. delta-rs removes what expired at each checkpoint (docs/performance.md,
# "Commits that stay cheap through a long run"). Delta Spark refuses a log retention shorter
# than the removed files' (7 days by default), which only a plain VACUUM (maintain names its
# own retention) and readers of earlier versions go by.
LOG_TABLE = {"delta.logRetentionDuration": "interval 10 seconds",
             "delta.deletedFileRetentionDuration": "interval 10 seconds"}
PACK_AFTER = 100  # small appends from one process after which a table's small files are packed
PACKED_FILE_BYTES = 16 * 2**20  # ... into files of up to this size (files this big stay)
STATS_PREFIX = 64  # characters of a string bound kept in file statistics (delta-rs's default)
COMMIT_RETRIES = 10_000  # appends never conflict: many writers at once only retry


def choose(engine_mode: str, path: str) -> str:
    """'delta-rs', 'spark' or 'reads-here' (Spark SQL, the tables' logs read by delta-rs once
    it is shown to reach the engine's lake): who carries out table operations for tables under
    `path`."""
    place = Location.of(path)
    if not (place.local or place.object_store):
        return "spark"
    return "delta-rs" if in_process(engine_mode) else "reads-here"


def table_ref(path: str) -> str:
    """A Delta table by path, in SQL (works on Sail and on Spark with Delta)."""
    return "delta.`" + str(path).replace("`", "``") + "`"


@dataclass(frozen=True)
class TableLayout:
    """A table's layout as it is, in one look (`TableOps.layout`; one DESCRIBE DETAIL where
    the engine tells it): its properties (None: the engine cannot tell), the columns it is
    partitioned by (None: the engine cannot tell) and those Delta liquid-clusters it by."""

    properties: dict[str, str] | None
    partitions: list[str] | None
    clustering: list[str]


class TableOps(Protocol):
    """What cdc-sql does to Delta tables besides queries. Commits that change a table's schema
    or rows outside a MERGE are marked EVOLVE_MARK (the hand-change check lets them pass)."""

    def exists(self, path: str) -> bool: ...
    def version(self, path: str) -> int | None: ...
    def history(self, path: str, after_version: int) -> list[tuple[int, str, str]] | None: ...
    def schema(self, path: str) -> pa.Schema: ...
    def create_arrow_table(self, path: str, schema: pa.Schema,
                           properties: dict | None = None) -> None: ...  # (none if there)
    def append_arrow(self, path: str, batches: Iterable[pa.RecordBatch],
                     schema: pa.Schema, schema_mode: str | None = None) -> None: ...
    def read_arrow(self, path: str, columns: list[str] | None = None,
                   where: list[tuple[str, str, object]] | None = None,
                   each_file_once: bool = False) -> pa.Table: ...
    def read_within(self, path: str, columns: list[str],
                    within: tuple[str, object, object]) -> pa.Table: ...
    def scan(self, path: str, columns: list[str], where: list[tuple[str, str, object]],
             serial: bool = False) -> pa.RecordBatchReader: ...
    def create_from_streams(self, path: str, schema: pa.Schema,
                            streams: list[Callable[[], Iterable[pa.RecordBatch]]],
                            properties: dict | None = None) -> None: ...
    def create_with_files(self, path: str, schema: pa.Schema, actions: list,
                          properties: dict | None = None) -> None: ...
    def replace_rows(self, path: str, table: pa.Table, schema: pa.Schema,
                     where: str) -> None: ...
    def reset(self, path: str, schema: pa.Schema) -> None: ...
    def add_columns(self, path: str, fields: list) -> None: ...
    def reshape(self, path: str, widen: dict, add: list[tuple],
                partitions: list[str] | None = None) -> None: ...
    def delete_rows(self, path: str, where: list[tuple[str, str, str]]) -> None: ...
    def update_rows(self, path: str, values: dict, where: list[tuple[str, str, str]]) -> None: ...
    def compact_and_vacuum(self, path: str, retention_hours: float,
                           compact: bool = True) -> dict: ...
    def cluster(self, path: str, columns: list[str]) -> None: ...
    def layout(self, path: str) -> TableLayout | None: ...  # None: no table there
    def alter_clustering(self, path: str, columns: tuple[str, ...]) -> None: ...
    def recluster(self, path: str, full: bool = False) -> None: ...
    def properties(self, path: str) -> dict[str, str]: ...
    def set_properties(self, path: str, chosen: dict[str, str]) -> None: ...
    def key_ranges(self, path: str, column: str) -> list[tuple] | None: ...
    def merges_here(self, path: str) -> bool: ...
    def unwritable(self, path: str) -> list[str]: ...
    def pinned(self) -> ContextManager[None]: ...
    def file_bytes(self, path: str, within: tuple[str, str, str] | None = None) -> int: ...
    def file_rows(self, path: str, within: tuple[str, str, str] | None = None) -> int: ...
    def plain_files(self, path: str) -> list[str] | None: ...
    def data_files(self, path: str, column: str) -> list[tuple[str, object, object]]: ...
    def replace_files(self, path: str, removed: list[str], added: list,
                      schema: pa.Schema) -> None: ...
    def merge_changes(self, path: str, changes: pa.Table, key: list[str],
                      columns: list[str]) -> None: ...


def pack_due(small_appends: int) -> bool:
    """Whether a table that took this many small appends since its last pack is packed now
    (DeltaRsTables.append_arrow)."""
    return small_appends >= PACK_AFTER


def clustered(files: list[tuple] | None, target_bytes: int = 0) -> bool:
    """Whether files, as (min key, max key, bytes), already hold disjoint key ranges none much
    larger than `target_bytes` (then a MERGE rewrites only the files of the keys it changes);
    None (no statistics) is not clustered. Numeric keys may overlap at the edges of neighbouring
    files, by a quarter of the smaller range at most: Sail spreads the record batches of one
    bronze file over its partitions, so the files it writes from one group of splits overlap
    their neighbour by a batch or two."""
    if files is None:
        return False
    ordered = sorted(files)
    small = 2 * (target_bytes or TARGET_FILE_BYTES)
    return all(size <= small for *_, size in files) and \
        all(_edge_overlap(a, b) for a, b in zip(ordered, ordered[1:])) and \
        all(low > high for (_, high, _), (low, _, _) in zip(ordered, ordered[2:]))


def _edge_overlap(first: tuple, second: tuple) -> bool:
    """Disjoint, or (numeric keys) overlapping by at most a quarter of the smaller range."""
    (low1, high1, _), (low2, high2, _) = first, second
    if low2 > high1:
        return True
    if not all(isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool)
               for v in (low1, high1, low2, high2)):
        return False
    return high2 > high1 and 4 * (high1 - low2) <= min(high1 - low1, high2 - low2)


def operation(operation: str, parameters, mark) -> str:
    """A commit's operation as the hand-change check sees it: our marked schema changes and our
    MERGEs under names of their own."""
    if mark in (EVOLVE_MARK, RESNAPSHOT_MARK, OWN_MERGE):  # OWN_MERGE: lake/file_merge.py
        return str(mark)
    if operation == "MERGE" and any(guard in str(parameters) for guard in _OWN_MERGE_GUARDS):
        return OWN_MERGE
    return str(operation)


def predicate(where: list[tuple[str, str, object]], quote_name) -> str:
    """Conditions on columns (column, operator, value), values as SQL literals rendered here
    and only here (the same in Spark SQL and DataFusion): Sail takes no parameters in a
    DELETE or UPDATE (docs/engines.md), and delta-rs has none at all."""
    assert all(op in ("<", "=", "<=", ">", ">=", "IS", "IN") for _, op, _ in where)
    return " AND ".join(
        f"{quote_name(c)} IN ({', '.join(literal(x) for x in v)})" if op == "IN" else
        f"{quote_name(c)} {op} {literal(v)}" for c, op, v in where) or "TRUE"


def literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(int(value))
    return string_literal(str(value))


def spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema, prefer_timestamp_ntz=True)  # naive timestamps are NTZ


def within_conditions(within: tuple[str, object, object]) -> list[tuple[str, str, object]]:
    """(column, after, upto) as the conditions after < column <= upto. Pure."""
    column, after, upto = within
    return [(column, ">", after), (column, "<=", upto)]


# -- delta-rs ---------------------------------------------------------------------------------
def commit_workers(local: bool, sizes: Iterable[int]) -> int:
    """How many tables `each` commits to at once, given the bytes each is given: on local
    storage, appends below SMALL_APPEND bytes spend their time in Python (a log read, a few
    rows' Parquet, a commit file) and threads only contend for its lock (1,000 small tables'
    appends: 1.2 ms a table one at a time, 2.0 ms with eight threads): one; otherwise
    (storage to wait on, or Parquet to encode) eight. Pure."""
    return 1 if local and all(size < SMALL_APPEND for size in sizes) else 8


def each(function, items: Iterable, workers: int = 8) -> list:
    """`function(item)` for every item, several at once: commits to different tables (each
    mostly waits on storage, or encodes Parquet without Python's lock); their results in
    order."""
    items = list(items)
    if len(items) <= 1 or workers == 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(min(workers, len(items)), "tables") as pool:
        return list(pool.map(function, items))


def writer_properties():
    """Snappy for what delta-rs writes (bronze, state, clustered silver), as for what pyarrow
    writes (lake/parquet_files.py): JVM Spark's Parquet reader (aircompressor 2.0) rejects some
    LZ4_RAW pages both write ("last 5 bytes must be literals"), and Snappy was the faster of
    the two for delta-rs here anyway.

    String bounds in file statistics cut at STATS_PREFIX characters (a maximum raised so it
    stays one), which is what delta-rs does when given no properties at all: properties that
    leave the length out write every string's bounds whole into the Delta log, so a table of
    multi-megabyte text values got a log entry of that size per commit, parsed again by every
    later reader of the table. Figures: docs/performance.md ("Writing bronze")."""
    from deltalake import WriterProperties

    return WriterProperties(compression="SNAPPY", max_row_group_size=ROW_GROUP_ROWS,
                            statistics_truncate_length=STATS_PREFIX)


def append_with_delta_rs(table, batches: Iterable[pa.RecordBatch], schema: pa.Schema,
                         max_commit_retries: int | None = None, schema_mode: str | None = None,
                         configuration: dict | None = None) -> None:
    """One delta-rs append commit of a stream of Arrow batches to `table` (a path or an open
    DeltaTable); memory follows one batch. `max_commit_retries`: for many writers committing
    at once (each lost race is a retry)."""
    from deltalake import CommitProperties, write_deltalake

    target = table if hasattr(table, "update_incremental") else str(table)
    # a list is handed over as Arrow's own reader: delta-rs's threads then pull it without
    # Python's lock (a stream's batches come from Python, a snapshot's reader)
    reader = pa.Table.from_batches(batches, schema).to_reader() if isinstance(batches, list) \
        else pa.RecordBatchReader.from_batches(schema, batches)
    write_deltalake(target, reader, mode="append",
                    writer_properties=writer_properties(), schema_mode=schema_mode,
                    configuration=configuration,
                    commit_properties=CommitProperties(max_commit_retries=max_commit_retries))


def stats_configuration(schema: pa.Schema) -> dict | None:
    """Which columns get file statistics, when Delta's default (the first 32) will not do:

    - decimals wider than 64 bits get none: delta-rs writes their min/max clamped to
      2^63-1, which breaks data skipping, and Sail then even reads a column whose min
      equals its max as that wrong value (docs/engines.md); nor do columns
      of types Delta Spark keeps no statistics of (`_skipping_type`);
    - past 32 columns, cdc-sql's own `_cdc_*` columns come first (windows are read by
      `_cdc_offset`, snapshot rows by split), then the others in order up to 32."""
    wide = {f.name for f in schema if pa.types.is_decimal(f.type) and f.type.precision > 18}
    if not wide and len(schema) <= STATS_COLUMNS:
        return None
    names = [f.name for f in schema if f.name not in wide and _skipping_type(f.type)]
    own = [n for n in names if n.startswith("_cdc_")]
    kept = own + [n for n in names if not n.startswith("_cdc_")][:max(0, STATS_COLUMNS - len(own))]
    return {"delta.dataSkippingStatsColumns": ",".join(quote(n) for n in kept)}


def new_table_configuration(schema: pa.Schema, properties: dict | None) -> dict | None:
    """A new table's properties: cdc-sql's statistics columns, then the pipeline's."""
    return {**(stats_configuration(schema) or {}), **(properties or {})} or None


def without_statistics(columns: tuple[str, ...], schema: pa.Schema,
                       properties: dict) -> dict[str, str]:
    """The columns among `columns` whose files Delta keeps no statistics of in a table of
    `schema` and table `properties`, each with why: Delta liquid-clusters only by columns
    with statistics, and its ALTER TABLE CLUSTER BY fails on another. Those kept: the
    table's delta.dataSkippingStatsColumns (stats_configuration sets it: no decimal wider
    than 18 digits, own columns first past 32), else its first
    delta.dataSkippingNumIndexedCols (32) columns, of the types Delta keeps them of. Pure."""
    listed = properties.get("delta.dataSkippingStatsColumns")
    if listed is not None:
        kept, which = set(_column_list(listed)), "the columns delta.dataSkippingStatsColumns lists"
    else:
        first = int(properties.get("delta.dataSkippingNumIndexedCols", STATS_COLUMNS))
        kept = set(schema.names[:first] if first >= 0 else schema.names)
        which = f"the first {first} columns, which have statistics"
    found = {}
    for column in columns:
        data_type = schema.field(column).type
        if pa.types.is_decimal(data_type) and data_type.precision > 18:
            found[column] = f"a DECIMAL({data_type.precision},{data_type.scale}): wider than " \
                            f"18 digits, cdc-sql writes it no statistics"
        elif not _skipping_type(data_type):
            found[column] = f"of type {data_type}, which Delta keeps no statistics of"
        elif column not in kept:
            found[column] = f"not among {which}"
    return found


def _column_list(text: str) -> list[str]:
    """The names of a delta.dataSkippingStatsColumns value (comma-separated, backquoted where
    a name needs it)."""
    return [quoted.replace("``", "`") if quoted else plain.strip()
            for quoted, plain in re.findall(r"`((?:[^`]|``)*)`|([^,`]+)", text)
            if quoted or plain.strip()]


def _skipping_type(data_type: pa.DataType) -> bool:
    """A type Delta Spark keeps statistics of: a column of another type (binary, boolean, ...)
    named in delta.dataSkippingStatsColumns fails every write there
    (DELTA_COLUMN_DATA_SKIPPING_NOT_SUPPORTED_TYPE)."""
    t = pa.types
    return t.is_integer(data_type) or t.is_floating(data_type) or t.is_decimal(data_type) or \
        t.is_date(data_type) or t.is_timestamp(data_type) or t.is_string(data_type) or \
        t.is_large_string(data_type)


def stats_properties(schema) -> dict:
    """`stats_configuration` for a Spark schema: table properties of a new table."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return stats_configuration(to_arrow_schema(schema)) or {}
