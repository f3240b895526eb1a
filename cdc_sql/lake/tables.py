"""Where the lake's Delta tables live, and the one interface for what cdc-sql does to them.

`storage(path)` (cdc_sql/location.py) tells a local path from an object store by its scheme, once,
for the whole target; `choose(engine_mode, path)` then picks who does the table operations:

| target.path                                    | sail, local (JVM)  | remote, active |
|------------------------------------------------|--------------------|----------------|
| a plain path, `file://`                        | delta-rs           | Spark SQL      |
| `s3://`, `s3a://`, `gs://`, `az://`, `abfss://` ... (OBJECT_STORES) | delta-rs | Spark SQL |
| any other scheme (`dbfs:`, `hdfs://`, ...)     | Spark SQL          | Spark SQL      |

delta-rs runs in this process: it needs no trip through Spark Connect for the small, frequent
commits of bronze and state, and it does what Sail 0.7 lacks (OPTIMIZE, VACUUM, history,
type changes). An engine in another process (remote, active) may not share this machine's file
system, so there everything goes through its own Spark SQL. Data queries (silver's MERGEs,
reads) always run on the engine.

deltalake and pyspark are imported where they are used: executors of snapshot tasks load this
module without a Spark session, and `validate`/`status` without either.
"""
from __future__ import annotations

import decimal
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import Callable, ContextManager, Iterable, Protocol

import pyarrow as pa

from cdc_sql.lake import parquet_files
from cdc_sql.lake.parquet_files import ROW_GROUP_ROWS
from cdc_sql.location import OBJECT_STORES, storage
from cdc_sql.sql import quote, string_literal

log = logging.getLogger("cdc_sql")
TARGET_FILE_BYTES = 128 * 2**20  # silver files after clustering
EVOLVE_MARK = "cdc-sql: schema change"  # commit metadata of cdc-sql's own schema changes
RESNAPSHOT_MARK = "cdc-sql: re-snapshot"  # of a silver table replaced by a re-snapshot
# A MERGE whose conditions use cdc-sql's own guard columns is one of ours (Sail writes no commit
# metadata, but every engine records the MERGE's predicates).
OWN_MERGE = "cdc-sql: merge"
_OWN_MERGE_GUARDS = ("_cdc_offset", "_cdc_valid_from")
_MAX_SLICE_BYTES = 32 * 2**20
STATS_COLUMNS = 32  # Delta's default number of columns with file statistics
COMMIT_RETRIES = 10_000  # appends never conflict: many writers at once only retry
WRITES_FEATURES = {"timestampNtz", "invariants", "appendOnly"}  # delta-rs writes these (1.6)


def choose(engine_mode: str, path: str) -> str:
    """'delta-rs' or 'spark': who carries out table operations for tables under `path`."""
    if engine_mode not in ("sail", "local"):
        return "spark"
    return "delta-rs" if storage(path) in ("local", *OBJECT_STORES) else "spark"


def table_ref(path: str) -> str:
    """A Delta table by path, in SQL (works on Sail and on Spark with Delta)."""
    return "delta.`" + str(path).replace("`", "``") + "`"


class TableOps(Protocol):
    """What cdc-sql does to Delta tables besides queries. Commits that change a table's schema
    or rows outside a MERGE are marked EVOLVE_MARK (the hand-change check lets them pass)."""

    def exists(self, path: str) -> bool: ...
    def version(self, path: str) -> int | None: ...
    def history(self, path: str, after_version: int) -> list[tuple[int, str, str]] | None: ...
    def schema(self, path: str) -> pa.Schema: ...
    def create_arrow_table(self, path: str, schema: pa.Schema) -> None: ...
    def append_arrow(self, path: str, batches: Iterable[pa.RecordBatch],
                     schema: pa.Schema, schema_mode: str | None = None) -> None: ...
    def read_arrow(self, path: str, columns: list[str] | None = None,
                   where: list[tuple[str, str, object]] | None = None) -> pa.Table: ...
    def scan(self, path: str, columns: list[str],
             where: list[tuple[str, str, object]]) -> pa.RecordBatchReader: ...
    def create_from_streams(self, path: str, schema: pa.Schema,
                            streams: list[Callable[[], Iterable[pa.RecordBatch]]]) -> None: ...
    def create_with_files(self, path: str, schema: pa.Schema, actions: list) -> None: ...
    def overwrite_arrow(self, path: str, table: pa.Table, schema: pa.Schema) -> None: ...
    def reset(self, path: str, schema: pa.Schema) -> None: ...
    def add_columns(self, path: str, fields: list) -> None: ...
    def reshape(self, path: str, widen: dict, add: list[tuple]) -> None: ...
    def delete_rows(self, path: str, where: list[tuple[str, str, str]]) -> None: ...
    def update_rows(self, path: str, values: dict, where: list[tuple[str, str, str]]) -> None: ...
    def compact_and_vacuum(self, path: str, retention_hours: float,
                           compact: bool = True) -> dict: ...
    def cluster(self, path: str, columns: list[str]) -> None: ...
    def key_ranges(self, path: str, column: str) -> list[tuple] | None: ...
    def merges_here(self, path: str) -> bool: ...
    def unwritable(self, path: str) -> list[str]: ...
    def pinned(self) -> ContextManager[None]: ...
    def file_bytes(self, path: str, within: tuple[str, str, str] | None = None) -> int: ...
    def merge_changes(self, path: str, changes: pa.Table, key: list[str],
                      columns: list[str]) -> None: ...


def clustered(files: list[tuple] | None, target_bytes: int = 0) -> bool:
    """Whether files, as (min key, max key, bytes), already hold disjoint key ranges none much
    larger than `target_bytes` (then a MERGE rewrites only the files of the keys it changes);
    None (no statistics) is not clustered. Numeric keys may overlap at the edges of neighbouring
    files, by a quarter of the smaller range at most: Sail spreads the record batches of one
    bronze file over its partitions, so the files it writes from one group of splits overlap
    their neighbour by a batch or two (measured: 10M rows, 11 files)."""
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
    if mark in (EVOLVE_MARK, RESNAPSHOT_MARK):
        return str(mark)
    if operation == "MERGE" and any(guard in str(parameters) for guard in _OWN_MERGE_GUARDS):
        return OWN_MERGE
    return str(operation)


def predicate(where: list[tuple[str, str, object]], quote_name) -> str:
    """Conditions on columns (column, operator, value), values as SQL literals rendered here
    and only here (the same in Spark SQL and DataFusion): Sail 0.7 takes no parameters in a
    DELETE or UPDATE, and delta-rs has none at all."""
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


# -- delta-rs ---------------------------------------------------------------------------------
def each(function, items: Iterable, workers: int = 8) -> None:
    """`function(item)` for every item, several at once: commits to different tables (each
    mostly waits on storage, or encodes Parquet without Python's lock)."""
    items = list(items)
    if len(items) <= 1:
        for item in items:
            function(item)
        return
    with ThreadPoolExecutor(min(workers, len(items)), "tables") as pool:
        for _ in pool.map(function, items):
            pass


def writer_properties():
    """Snappy for what delta-rs writes (bronze, state, clustered silver): JVM Spark's Parquet
    reader (aircompressor 2.0) rejects some LZ4_RAW pages delta-rs 1.6 writes ("last 5 bytes
    must be literals"), and Snappy was the faster of the two here anyway (2M rows, 5 columns:
    0.6 s against 1.0 s, the same size)."""
    from deltalake import WriterProperties

    return WriterProperties(compression="SNAPPY", max_row_group_size=ROW_GROUP_ROWS)


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

    - decimals wider than 64 bits get none: delta-rs 1.6 writes their min/max clamped to
      2^63-1, which breaks data skipping, and Sail 0.7 then even reads a column whose min
      equals its max as that wrong value (BIGINT UNSIGNED max became 2^63-1); nor do columns
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


def _add_actions(table) -> pa.Table:
    """The table's add actions, statistics flattened (through the Arrow stream interface:
    `pa.table` on delta-rs's own Arrow object took 2.4 ms a table, this 0.15 ms)."""
    return pa.RecordBatchReader.from_stream(table.get_add_actions(flatten=True)).read_all()


def _marked():
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={"userMetadata": EVOLVE_MARK})


def _df_quote(name: str) -> str:
    """An identifier in delta-rs (DataFusion) SQL."""
    return '"' + name.replace('"', '""') + '"'


class DeltaRsTables:
    """Table operations with delta-rs, in this process. Tables stay open between operations
    (opening one replays its log: 15 ms of a 30 ms state commit); a stream of batches opens its
    table for itself, so that streams into one table are written side by side."""

    def __init__(self):
        self._open_tables: dict[str, list] = {}  # path -> [its lock, its DeltaTable or None]
        self._lock = threading.Lock()
        self._local = threading.local()  # .refreshed: the paths `pinned` brought up to date

    @contextmanager
    def pinned(self):
        """Within it, this thread brings each table up to date once, at its first use: for
        work that reads the same tables several times and alone writes them (through these
        open tables, which follow their own commits)."""
        self._local.refreshed = set()
        try:
            yield
        finally:
            self._local.refreshed = None

    @contextmanager
    def _table(self, path: str):
        """The table at `path`, brought up to its latest version, used by one thread at once."""
        from deltalake import DeltaTable

        with self._lock:
            entry = self._open_tables.setdefault(str(path), [threading.Lock(), None])
        refreshed = getattr(self._local, "refreshed", None)
        with entry[0]:
            if entry[1] is not None and (refreshed is None or str(path) not in refreshed):
                try:
                    entry[1].update_incremental()
                except Exception:  # noqa: BLE001 - replaced (recreated, vacuumed): open anew
                    entry[1] = None
            if entry[1] is None:
                entry[1] = DeltaTable(str(path))
            if refreshed is not None:
                refreshed.add(str(path))
            yield entry[1]

    def exists(self, path: str) -> bool:
        if storage(path) == "local":
            import os

            return os.path.isdir(os.path.join(str(path), "_delta_log"))
        from cdc_sql.lake import objects

        return objects.has_delta_log(str(path))

    def version(self, path: str) -> int | None:
        with self._table(path) as table:
            return table.version()

    def history(self, path: str, after_version: int) -> list[tuple[int, str, str]] | None:
        with self._table(path) as table:
            count = table.version() - after_version
            commits = table.history(count) if count > 0 else []
        return sorted((int(c["version"]), operation(c.get("operation"),
                                                    c.get("operationParameters"),
                                                    c.get("userMetadata")),
                       str((c.get("operationParameters") or {}).get("version", "")))
                      for c in commits if int(c["version"]) > after_version)

    def schema(self, path: str) -> pa.Schema:
        with self._table(path) as table:
            return pa.schema(table.schema().to_arrow())

    def create_arrow_table(self, path: str, schema: pa.Schema) -> None:
        from deltalake import DeltaTable, write_deltalake

        if not self.exists(path):
            write_deltalake(str(path), schema.empty_table(), mode="append",
                            configuration=stats_configuration(schema))
            self._allow_ntz(DeltaTable(str(path)), schema)

    def append_arrow(self, path: str, batches: Iterable[pa.RecordBatch], schema: pa.Schema,
                     schema_mode: str | None = None) -> None:
        """A list of batches goes through the open table; a stream opens it for itself, or,
        into a local table of the same columns, is written by pyarrow and committed through the
        open table (lake/parquet_files.py: half the CPU)."""
        exists = self.exists(path)
        if exists and not isinstance(batches, list) and schema_mode is None and \
                storage(path) == "local" and self.schema(path) == schema:
            self._append_files(path, batches, schema)
            return
        if not isinstance(batches, list) or not exists:
            if schema_mode == "merge":
                from deltalake import DeltaTable

                self._allow_ntz(DeltaTable(str(path)), schema)
            append_with_delta_rs(path, batches, schema, schema_mode=schema_mode,
                                 configuration=None if exists else stats_configuration(schema))
            return
        with self._table(path) as table:
            if schema_mode == "merge":
                self._allow_ntz(table, schema)
            append_with_delta_rs(table, batches, schema, schema_mode=schema_mode)

    def _append_files(self, path: str, batches: Iterable[pa.RecordBatch],
                      schema: pa.Schema) -> None:
        """The files written without the table (streams into one table are written side by
        side), then one append commit of them, if any."""
        from deltalake import CommitProperties

        actions = parquet_files.write_files(str(path), schema, batches)
        if actions:
            with self._table(path) as table:
                table.create_write_transaction(
                    actions, "append", schema,
                    commit_properties=CommitProperties(max_commit_retries=COMMIT_RETRIES))

    def read_arrow(self, path: str, columns: list[str] | None = None,
                   where: list[tuple[str, str, object]] | None = None) -> pa.Table:
        """The table's rows (`where`: (column, operator, value) conditions, files skipped by
        their statistics)."""
        with self._table(path) as table:
            return table.to_pyarrow_table(columns=columns, filters=where or None)

    def scan(self, path: str, columns: list[str],
             where: list[tuple[str, str, object]]) -> pa.RecordBatchReader:
        """The rows of `read_arrow` as a stream (memory follows a few batches: the defaults
        read 16 batches of 128k rows ahead of a slower consumer), opened now:
        a delta-rs call from inside another delta-rs write (a stream it consumes) panics."""
        import pyarrow.parquet as pq

        options = {}
        with self._table(path) as table:
            if storage(path) == "local":  # pyarrow's own file system: 1.6x delta-rs's here
                from pyarrow.dataset import ParquetFragmentScanOptions
                from pyarrow.fs import LocalFileSystem, SubTreeFileSystem

                dataset = table.to_pyarrow_dataset(
                    filesystem=SubTreeFileSystem(str(path), LocalFileSystem()))
                # no coalesced read-ahead of row groups on a local disk: a 10M-row copy held
                # 156 MB instead of 270 MB, and ran no slower
                options["fragment_scan_options"] = ParquetFragmentScanOptions(pre_buffer=False)
            else:
                dataset = table.to_pyarrow_dataset()
        condition = pq.filters_to_expression(
            [(c, "in" if op == "IN" else op, v) for c, op, v in where])
        return dataset.scanner(columns=columns, filter=condition, batch_size=64 * 1024,
                               batch_readahead=2, fragment_readahead=1, **options).to_reader()

    def create_from_streams(self, path: str, schema: pa.Schema,
                            streams: list[Callable[[], Iterable[pa.RecordBatch]]]) -> None:
        """Create the table with the rows of `streams` (each opened when called), in one
        commit: written in parallel by pyarrow on a local path (lake/parquet_files.py), else
        streamed through delta-rs (all opened first: no delta-rs call from inside its write)."""
        if storage(path) == "local":
            parquet_files.create_table(str(path), schema, streams,
                                       configuration=stats_configuration(schema))
            return
        opened = [stream() for stream in streams]
        self.append_arrow(path, (batch for stream in opened for batch in stream), schema)

    def create_with_files(self, path: str, schema: pa.Schema, actions: list) -> None:
        """Create the local table in one commit of Parquet files already in its directory
        (`actions`: their delta-rs add actions)."""
        parquet_files.create_with(str(path), schema, actions,
                                  configuration=stats_configuration(schema))

    def overwrite_arrow(self, path: str, table: pa.Table, schema: pa.Schema) -> None:
        from deltalake import write_deltalake

        write_deltalake(str(path), table, mode="overwrite", writer_properties=writer_properties())

    def reset(self, path: str, schema: pa.Schema) -> None:
        """Empty the table (created if missing), with `schema`, in one marked commit."""
        from deltalake import DeltaTable, write_deltalake

        if not self.exists(path):
            self.create_arrow_table(path, schema)
            return
        self._allow_ntz(DeltaTable(str(path)), schema)
        write_deltalake(str(path), schema.empty_table(), mode="overwrite",
                        schema_mode="overwrite", commit_properties=_marked())

    def add_columns(self, path: str, fields: list) -> None:
        """Add nullable columns (Spark StructFields): an empty mergeSchema append."""
        from deltalake import DeltaTable, write_deltalake
        from pyspark.sql.pandas.types import to_arrow_type

        table = DeltaTable(str(path))
        schema = pa.schema(table.schema().to_arrow())
        for f in fields:
            schema = schema.append(pa.field(f.name, to_arrow_type(f.dataType), True))
        self._allow_ntz(table, schema)
        write_deltalake(str(path), schema.empty_table(), mode="append", schema_mode="merge",
                        commit_properties=_marked())

    def reshape(self, path: str, widen: dict, add: list[tuple]) -> None:
        """Rewrite the table in one commit, streaming: columns in `widen` (name -> Spark type)
        cast to it, and columns in `add` ((name, Spark type, column to copy or None)) added."""
        from deltalake import DeltaTable, write_deltalake
        from pyspark.sql.pandas.types import to_arrow_type

        table = DeltaTable(str(path))
        dataset = table.to_pyarrow_dataset()
        schema = pa.schema([f.with_type(to_arrow_type(widen[f.name])) if f.name in widen
                            else f for f in dataset.schema])
        for name, data_type, _ in add:
            schema = schema.append(pa.field(name, to_arrow_type(data_type), True))
        self._allow_ntz(table, schema)

        def batches():
            for batch in dataset.to_batches():
                columns = {f.name: batch.column(f.name) for f in dataset.schema}
                for name, data_type, source in add:
                    columns[name] = columns[source] if source else \
                        pa.nulls(batch.num_rows, to_arrow_type(data_type))
                yield pa.RecordBatch.from_arrays(
                    [columns[f.name].cast(f.type) for f in schema], schema=schema)

        write_deltalake(str(path), pa.RecordBatchReader.from_batches(schema, batches()),
                        mode="overwrite", schema_mode="overwrite", commit_properties=_marked(),
                        writer_properties=writer_properties())

    @staticmethod
    def _allow_ntz(table, schema: pa.Schema) -> None:
        """delta-rs writes TIMESTAMP_NTZ columns without declaring the table feature readers
        (Sail) require: declare it first."""
        declared = table.protocol().writer_features or []
        if "timestampNtz" not in declared and \
                any(pa.types.is_timestamp(f.type) and f.type.tz is None for f in schema):
            from deltalake import TableFeatures

            table.alter.add_feature(TableFeatures.TimestampWithoutTimezone,
                                    allow_protocol_versions_increase=True,
                                    commit_properties=_marked())

    def delete_rows(self, path: str, where: list[tuple[str, str, str]]) -> None:
        """DELETE the rows matching every (column, operator, value) of `where`."""
        from deltalake import DeltaTable

        DeltaTable(str(path)).delete(predicate(where, _df_quote), commit_properties=_marked())

    def update_rows(self, path: str, values: dict, where: list[tuple[str, str, str]]) -> None:
        """UPDATE columns to values (text, or None for NULL) in rows matching `where`."""
        from deltalake import DeltaTable

        DeltaTable(str(path)).update(
            updates={_df_quote(c): literal(v) for c, v in values.items()},
            predicate=predicate(where, _df_quote), commit_properties=_marked())

    def compact_and_vacuum(self, path: str, retention_hours: float, compact: bool = True) -> dict:
        """Rewrite small files into large ones (unless `compact` is False: a table `cluster`
        just rewrote, whose files a bin-packing would mix again), then delete files no version
        within the retention still needs."""
        from deltalake import DeltaTable

        table = DeltaTable(str(path))
        compacted = table.optimize.compact() if compact else {}
        removed = table.vacuum(retention_hours=int(retention_hours), dry_run=False,
                               enforce_retention_duration=False)
        return {"files_added": compacted.get("numFilesAdded", 0),
                "files_removed": compacted.get("numFilesRemoved", 0),
                "files_vacuumed": len(removed)}

    def cluster(self, path: str, columns: list[str]) -> None:
        """Rewrite the table sorted by `columns` (the key) into files of TARGET_FILE_BYTES, so
        each file holds one key range and a MERGE rewrites only the files of the keys it
        changes (Sail and Delta both skip files no changed key falls in). Rows do not change:
        an OPTIMIZE commit."""
        from deltalake import DeltaTable

        DeltaTable(str(path)).optimize.z_order(  # sorts spill to disk past 512 MB
            columns, target_size=TARGET_FILE_BYTES, max_spill_size=512 * 2**20,
            writer_properties=writer_properties())

    def key_ranges(self, path: str, column: str) -> list[tuple] | None:
        """(min, max, bytes) of `column` in each file, from the Delta log's statistics; None
        when a file has none."""
        files = self._file_stats(path, column)
        return None if any(low is None or high is None for low, high, _ in files) else files

    def _file_stats(self, path: str, column: str | None) -> list[tuple]:
        """(min, max, bytes) of `column` in each file, None where the log has no statistics."""
        with self._table(path) as table:
            actions = _add_actions(table)
        sizes = actions.column("size_bytes").to_pylist()
        if column is None or f"min.{column}" not in actions.column_names:
            return [(None, None, size) for size in sizes]
        return list(zip(actions.column(f"min.{column}").to_pylist(),
                        actions.column(f"max.{column}").to_pylist(), sizes))

    def merges_here(self, path: str) -> bool:
        """Whether delta-rs may MERGE into the table: no feature it cannot write (deletion
        vectors, column mapping, ...: a table an engine created with its own defaults); a
        table not there yet delta-rs creates."""
        return not self.unwritable(path)

    def unwritable(self, path: str) -> list[str]:
        """What about the table delta-rs cannot write: its table features outside the few it
        writes, an older protocol past its versions, or append-only; [] for a table not there
        yet (delta-rs creates it)."""
        if not self.exists(path):
            return []
        with self._table(path) as table:
            protocol = table.protocol()
            append_only = table.metadata().configuration.get("delta.appendOnly") == "true"
        found = sorted(set(protocol.reader_features or ()) - {"timestampNtz"} |
                       set(protocol.writer_features or ()) - WRITES_FEATURES)
        if protocol.min_reader_version > 3 or protocol.min_writer_version > 7 or \
                (protocol.writer_features is None and protocol.min_writer_version > 4):
            found.append(f"protocol {protocol.min_reader_version}/{protocol.min_writer_version}")
        return found + (["appendOnly"] if append_only else [])

    def file_bytes(self, path: str, within: tuple[str, str, str] | None = None) -> int:
        """Bytes of the table's data files; `within` (column, after, upto): only of the files
        that may hold rows with after < column <= upto by their statistics (a file without
        statistics on the column counts)."""
        column, after, upto = within or (None, None, None)
        return sum(size for low, high, size in self._file_stats(path, column)
                   if low is None or high is None or (low <= upto and high > after))

    def merge_changes(self, path: str, changes: pa.Table, key: list[str],
                      columns: list[str]) -> None:
        """silver_merge.sql's MERGE of the last change per key (`changes`: `columns` and
        `_cdc_remove`), by delta-rs: offsets only move forward, so a replay changes nothing."""
        on = " AND ".join(f"t.{_df_quote(k)} = s.{_df_quote(k)}" for k in key)
        values = {_df_quote(c): f"s.{_df_quote(c)}" for c in columns}
        with self._table(path) as table:
            table.merge(source=changes, predicate=on, source_alias="s", target_alias="t") \
                .when_matched_delete(predicate="s._cdc_offset > t._cdc_offset AND s._cdc_remove") \
                .when_matched_update(updates=values, predicate="s._cdc_offset > t._cdc_offset") \
                .when_not_matched_insert(updates=values, predicate="NOT s._cdc_remove") \
                .execute()


# -- Spark SQL --------------------------------------------------------------------------------
class SparkTables:
    """Table operations through the engine's own Spark SQL (its file system, its catalog)."""

    def __init__(self, engine):
        self.engine = engine

    @property
    def spark(self):
        return self.engine.spark

    def exists(self, path: str) -> bool:
        try:
            self.engine.read(path).schema  # noqa: B018 - forces resolution
            return True
        except Exception:  # noqa: BLE001 - any engine's "not a Delta table"
            return False

    def version(self, path: str) -> int | None:
        if not self.engine.describes_history:
            return None
        return int(self.spark.sql(f"DESCRIBE HISTORY {table_ref(path)} LIMIT 1").collect()[0][0])

    def history(self, path: str, after_version: int) -> list[tuple[int, str, str]] | None:
        """None when this engine cannot tell (Sail 0.7 has no DESCRIBE HISTORY)."""
        if not self.engine.describes_history:
            return None
        rows = [(r["version"], r["operation"], r["operationParameters"], r["userMetadata"])
                for r in self.spark.sql(f"DESCRIBE HISTORY {table_ref(path)}").collect()]
        return sorted((int(v), operation(op, params, mark), str((params or {}).get("version", "")))
                      for v, op, params, mark in rows if int(v) > after_version)

    def schema(self, path: str) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.engine.read(path).schema)

    def create_arrow_table(self, path: str, schema: pa.Schema) -> None:
        if not self.exists(path):
            self.engine.append(self.spark.createDataFrame([], spark_schema(schema)), path)

    def append_arrow(self, path: str, batches: Iterable[pa.RecordBatch], schema: pa.Schema,
                     schema_mode: str | None = None) -> None:
        for batch in batches:  # Sail rejects gRPC messages over 128 MB: send slices
            rows = max(1, int(batch.num_rows * _MAX_SLICE_BYTES / max(batch.nbytes, 1)))
            for start in range(0, batch.num_rows, rows):
                table = pa.Table.from_batches([batch.slice(start, rows)])
                df = self.spark.createDataFrame(table, spark_schema(schema))
                df.write.format("delta").mode("append") \
                    .option("mergeSchema", str(schema_mode == "merge").lower()).save(str(path))

    def read_arrow(self, path: str, columns: list[str] | None = None,
                   where: list[tuple[str, str, object]] | None = None) -> pa.Table:
        df = self.engine.read(path)
        if where:
            df = df.where(predicate(where, quote))
        return (df.select(*columns) if columns else df).toArrow()

    def overwrite_arrow(self, path: str, table: pa.Table, schema: pa.Schema) -> None:
        self.spark.createDataFrame(table, spark_schema(schema)).write.format("delta") \
            .mode("overwrite").save(str(path))

    def reset(self, path: str, schema: pa.Schema) -> None:
        self.spark.createDataFrame([], spark_schema(schema)).write.format("delta") \
            .mode("overwrite").option("overwriteSchema", "true") \
            .option("userMetadata", EVOLVE_MARK).save(str(path))

    def add_columns(self, path: str, fields: list) -> None:
        """ALTER TABLE ADD COLUMNS, or where the engine has none (Sail, which also ignores an
        empty schema-merging append), the table rewritten with the columns in one commit."""
        statement = self.engine.add_columns_sql(table_ref(path), fields)
        if statement is not None:
            self._marked_sql(statement)
        else:
            self.reshape(path, {}, [(f.name, f.dataType, None) for f in fields])

    def reshape(self, path: str, widen: dict, add: list[tuple]) -> None:
        from pyspark.sql import functions as F

        table = self.engine.read(path)
        table.select(*(F.col(c).cast(widen[c]).alias(c) if c in widen else F.col(c)
                       for c in table.columns),
                     *((F.col(source) if source else F.lit(None)).cast(t).alias(name)
                       for name, t, source in add)) \
            .write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
            .option("userMetadata", EVOLVE_MARK).save(str(path))

    def delete_rows(self, path: str, where: list[tuple[str, str, str]]) -> None:
        self._marked_sql(f"DELETE FROM {table_ref(path)} WHERE {predicate(where, quote)}")

    def update_rows(self, path: str, values: dict, where: list[tuple[str, str, str]]) -> None:
        assignments = ", ".join(f"{quote(c)} = {literal(v)}" for c, v in values.items())
        self._marked_sql(f"UPDATE {table_ref(path)} SET {assignments} WHERE "
                         f"{predicate(where, quote)}")

    def compact_and_vacuum(self, path: str, retention_hours: float, compact: bool = True) -> dict:
        if not self.engine.optimizes:
            log.warning("%s: this engine cannot compact or vacuum Delta tables; skipped", path)
            return {}
        ref = table_ref(path)
        if compact:
            self.spark.sql(f"OPTIMIZE {ref}").collect()
        # Delta refuses a retention under a week unless told to: cdc-sql's is the user's choice
        check = "spark.databricks.delta.retentionDurationCheck.enabled"
        self.spark.conf.set(check, "false")
        try:
            self.spark.sql(f"VACUUM {ref} RETAIN {float(retention_hours)} HOURS").collect()
        finally:
            self.spark.conf.unset(check)
        return {}

    def key_ranges(self, path: str, column: str) -> list[tuple] | None:
        return None  # the engine's own OPTIMIZE decides

    def merges_here(self, path: str) -> bool:
        return False  # the engine's storage: only its own MERGE

    def unwritable(self, path: str) -> list[str]:
        return []  # the engine writes whatever it reads

    def pinned(self) -> ContextManager[None]:
        return nullcontext()  # every read goes to the engine

    def file_bytes(self, path: str, within: tuple[str, str, str] | None = None) -> int:
        raise NotImplementedError("merges_here is False: nothing is merged here")

    def scan(self, path: str, columns: list[str],
             where: list[tuple[str, str, object]]) -> pa.RecordBatchReader:
        raise NotImplementedError("merges_here is False: nothing is merged here")

    def create_from_streams(self, path: str, schema: pa.Schema,
                            streams: list[Callable[[], Iterable[pa.RecordBatch]]]) -> None:
        raise NotImplementedError("merges_here is False: nothing is merged here")

    def create_with_files(self, path: str, schema: pa.Schema, actions: list) -> None:
        raise NotImplementedError("merges_here is False: nothing is merged here")

    def merge_changes(self, path: str, changes: pa.Table, key: list[str],
                      columns: list[str]) -> None:
        raise NotImplementedError("merges_here is False: silver's SQL MERGE")

    def cluster(self, path: str, columns: list[str]) -> None:
        if not self.engine.optimizes:
            log.warning("%s: this engine cannot cluster Delta tables; skipped", path)
            return
        self.spark.sql(f"OPTIMIZE {table_ref(path)} ZORDER BY "
                       f"({', '.join(quote(c) for c in columns)})").collect()

    def _marked_sql(self, statement: str) -> None:
        # Session-wide: a MERGE another thread commits meanwhile carries the mark too, which
        # is true of it as well (every commit of this session is cdc-sql's own).
        self.spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", EVOLVE_MARK)
        try:
            self.spark.sql(statement).collect()
        finally:
            self.spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")


class WithFallback:
    """delta-rs's table operations, except that a change to a table asking for features
    delta-rs cannot write (deletion vectors or column mapping, which Databricks turns on for
    new tables and a user may turn on for silver) goes through the engine's Spark SQL. Reads
    stay with delta-rs, which reads those features. Each table's features are said once."""

    ROUTED = ("add_columns", "reshape", "delete_rows", "update_rows", "compact_and_vacuum",
              "cluster", "overwrite_arrow", "reset")

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
        method = getattr(self._tables, name)
        if name not in self.ROUTED:
            return method

        def routed(path: str, *args, **kwargs):
            if not self.unwritable(path):
                return method(path, *args, **kwargs)
            return getattr(SparkTables(self._engine), name)(path, *args, **kwargs)

        return routed


def table_ops(engine, root: str) -> TableOps:
    if choose(engine.mode, root) == "delta-rs":
        return WithFallback(DeltaRsTables(), engine)  # type: ignore[return-value]
    return SparkTables(engine)
