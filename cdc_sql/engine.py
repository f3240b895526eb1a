"""Spark sessions, and the one place that knows how engines differ.

Modes:
- `sail`   (default) an in-process Sail Spark Connect server (pysail): no JVM, Delta built in.
- `remote` any Spark Connect URL (`sc://host:port`), e.g. a Spark 4 cluster with Delta.
- `active` the SparkSession already running, as in a Databricks job.
- `local`  a JVM Spark with delta-spark; needs the Delta jars from Maven or `spark.jars`.
Everything else speaks portable Spark SQL through the session this module returns.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Iterable

import pyarrow as pa

from cdc_sql.errors import CdcError
from cdc_sql.sql import quote, string_literal

log = logging.getLogger(__name__)
SESSION_CONF = {"spark.sql.session.timeZone": "UTC"}
_MAX_SLICE_BYTES = 32 * 2**20
TARGET_FILE_BYTES = 128 * 2**20  # silver files after clustering
EVOLVE_MARK = "cdc-sql: schema change"  # commit metadata of cdc-sql's own schema changes
# A MERGE whose conditions use cdc-sql's own guard columns: one of ours (Sail writes no commit
# metadata, but every engine records the MERGE's predicates).
OWN_MERGE = "cdc-sql: merge"
_OWN_MERGE_GUARDS = ("_cdc_offset", "_cdc_valid_from")


def append_with_delta_rs(path: str, batches: Iterable[pa.RecordBatch], schema: pa.Schema,
                         max_commit_retries: int | None = None) -> None:
    """One delta-rs append commit of a stream of Arrow batches; memory follows one batch.
    `max_commit_retries`: for many writers committing at once (each lost race is a retry)."""
    from deltalake import CommitProperties, write_deltalake

    write_deltalake(str(path), pa.RecordBatchReader.from_batches(schema, batches), mode="append",
                    writer_properties=_writer_properties(),
                    commit_properties=CommitProperties(max_commit_retries=max_commit_retries))


def _writer_properties():
    """LZ4 for bronze and state: about 10% more snapshot rows/s than Snappy here, and read by
    every Parquet reader cdc-sql targets (Spark, Sail, delta-rs)."""
    from deltalake import WriterProperties

    return WriterProperties(compression="LZ4_RAW")


def table_ref(path: str) -> str:
    """A Delta table by path, in SQL (works on Sail and on Spark with Delta)."""
    return "delta.`" + str(path).replace("`", "``") + "`"


@dataclass
class Engine:
    mode: str
    spark: object
    _server: object = field(default=None, repr=False)
    # How Arrow data from this process reaches Delta: "delta-rs" (engines sharing this machine's
    # file system: sail, local) or "spark" (createDataFrame + append, for remote engines).
    arrow_writer: str = ""

    def __post_init__(self):
        self.arrow_writer = self.arrow_writer or ("delta-rs" if self.mode in ("sail", "local")
                                                  else "spark")

    def table_ref(self, path: str) -> str:
        return table_ref(path)

    def read(self, path: str):
        return self.spark.read.format("delta").load(str(path))

    def exists(self, path: str) -> bool:
        # Checked on the driver's file system for local paths; engines agree on `_delta_log`.
        if "://" in str(path):
            try:
                self.read(path).schema  # noqa: B018 - forces resolution
                return True
            except Exception:  # noqa: BLE001 - any engine's "not a Delta table"
                return False
        return os.path.isdir(os.path.join(str(path), "_delta_log"))

    def append(self, df, path: str) -> None:
        df.write.format("delta").mode("append").save(str(path))

    def _delta_rs(self, path: str) -> bool:
        """Arrow data from this process (snapshot rows, binlog changes) goes to Delta through
        delta-rs where the engine shares our file system: no trip through Spark Connect, one
        commit per stream, about 2.5x the rows/s of createDataFrame + append on Sail."""
        return self.arrow_writer == "delta-rs" and "://" not in str(path)

    def create_arrow_table(self, path: str, schema: pa.Schema) -> None:
        if self.exists(path):
            return
        if self._delta_rs(path):
            from deltalake import write_deltalake

            write_deltalake(str(path), schema.empty_table(), mode="append",
                            configuration=_stats_configuration(schema))
        else:
            self.append(self.spark.createDataFrame([], _spark_schema(schema)), path)

    def append_arrow(self, path: str, batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> None:
        """Append a stream of Arrow batches; memory follows one batch."""
        if self._delta_rs(path):
            append_with_delta_rs(path, batches, schema)
            return
        for batch in batches:  # Sail rejects gRPC messages over 128 MB: send slices
            rows = max(1, int(batch.num_rows * _MAX_SLICE_BYTES / max(batch.nbytes, 1)))
            for start in range(0, batch.num_rows, rows):
                table = pa.Table.from_batches([batch.slice(start, rows)])
                self.append(self.spark.createDataFrame(table, _spark_schema(schema)), path)

    def read_arrow(self, path: str, columns: list[str] | None = None) -> pa.Table:
        """A small table's rows in this process (state): delta-rs where it shares our file
        system (a few ms; a query through Spark Connect costs 20-30 ms)."""
        if self._delta_rs(path):
            from deltalake import DeltaTable

            return DeltaTable(str(path)).to_pyarrow_table(columns=columns)
        df = self.read(path)
        return (df.select(*columns) if columns else df).toArrow()

    def overwrite_arrow(self, path: str, table: pa.Table, schema: pa.Schema) -> None:
        """Replace a small table's rows in one commit."""
        if self._delta_rs(path):
            from deltalake import write_deltalake

            write_deltalake(str(path), table, mode="overwrite", writer_properties=_writer_properties())
            return
        self.spark.createDataFrame(table, _spark_schema(schema)).write.format("delta") \
            .mode("overwrite").save(str(path))

    # -- schema changes after a source DDL, in commits marked as cdc-sql's own (EVOLVE_MARK),
    # which the hand-change check lets pass. delta-rs where the table is on our file system
    # (Sail 0.7 has no ALTER TABLE, and an empty mergeSchema append commits nothing), Spark
    # SQL elsewhere.
    def add_columns(self, path: str, fields: list) -> None:
        """Add nullable columns (Spark StructFields)."""
        if "://" not in str(path):
            from deltalake import DeltaTable, write_deltalake
            from pyspark.sql.pandas.types import to_arrow_type

            table = DeltaTable(str(path))
            schema = pa.schema(table.schema().to_arrow())
            for f in fields:
                schema = schema.append(pa.field(f.name, to_arrow_type(f.dataType), True))
            self._allow_ntz(table, schema)
            write_deltalake(str(path), schema.empty_table(), mode="append", schema_mode="merge",
                            commit_properties=_marked())
            return
        columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in fields)
        self._marked_sql(f"ALTER TABLE {table_ref(path)} ADD COLUMNS ({columns})")

    def reshape(self, path: str, widen: dict, add: list[tuple]) -> None:
        """Rewrite the table in one commit, streaming: columns in `widen` (name -> Spark type)
        cast to it, and columns in `add` ((name, Spark type, column to copy or None)) added."""
        if "://" not in str(path):
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
                            writer_properties=_writer_properties())
            return
        from pyspark.sql import functions as F

        table = self.read(path)
        table.select(*(F.col(c).cast(widen[c]).alias(c) if c in widen else F.col(c)
                       for c in table.columns),
                     *((F.col(source) if source else F.lit(None)).cast(t).alias(name)
                       for name, t, source in add)) \
            .write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
            .option("userMetadata", EVOLVE_MARK).save(str(path))

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
        if "://" not in str(path):
            from deltalake import DeltaTable

            DeltaTable(str(path)).delete(_predicate(where, _df_quote), commit_properties=_marked())
            return
        self._marked_sql(f"DELETE FROM {table_ref(path)} WHERE {_predicate(where, quote)}")

    def update_rows(self, path: str, values: dict[str, str], where: list[tuple[str, str, str]]) -> None:
        """UPDATE columns to values (text, or None for NULL) in rows matching `where`."""
        if "://" not in str(path):
            from deltalake import DeltaTable

            DeltaTable(str(path)).update(
                updates={_df_quote(c): _literal(v) for c, v in values.items()},
                predicate=_predicate(where, _df_quote), commit_properties=_marked())
            return
        assignments = ", ".join(f"{quote(c)} = {_literal(v)}" for c, v in values.items())
        self._marked_sql(f"UPDATE {table_ref(path)} SET {assignments} WHERE "
                         f"{_predicate(where, quote)}")

    def _marked_sql(self, statement: str) -> None:
        self.spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", EVOLVE_MARK)
        try:
            self.spark.sql(statement).collect()
        finally:
            self.spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")

    # -- what Sail lacks, done through delta-rs where the table is on our file system ---------
    def history(self, path: str, after_version: int) -> list[tuple[int, str, str]] | None:
        """(version, operation, version restored to or '') of the table's commits after
        `after_version`; None when this engine cannot tell (Sail 0.7 has no DESCRIBE HISTORY
        and the table is not on our file system)."""
        if "://" not in str(path):
            from deltalake import DeltaTable

            table = DeltaTable(str(path))
            count = table.version() - after_version
            commits = table.history(count) if count > 0 else []
            rows = [(c["version"], c.get("operation"), c.get("operationParameters"),
                     c.get("userMetadata")) for c in commits]
        elif self.mode == "sail":
            return None
        else:
            rows = [(r["version"], r["operation"], r["operationParameters"], r["userMetadata"])
                    for r in self.spark.sql(f"DESCRIBE HISTORY {table_ref(path)}").collect()]
        return sorted((int(v), _operation(op, params, mark),
                       str((params or {}).get("version", "")))
                      for v, op, params, mark in rows if int(v) > after_version)

    def version(self, path: str) -> int | None:
        if "://" not in str(path):
            from deltalake import DeltaTable

            return DeltaTable(str(path)).version()
        if self.mode == "sail":
            return None
        return int(self.spark.sql(f"DESCRIBE HISTORY {table_ref(path)} LIMIT 1").collect()[0][0])

    def compact_and_vacuum(self, path: str, retention_hours: float, compact: bool = True) -> dict:
        """Rewrite small files into large ones (unless `compact` is False: a table `cluster`
        just rewrote, whose files a bin-packing would mix again), then delete files no version
        within the retention still needs: OPTIMIZE/VACUUM on Spark, delta-rs otherwise."""
        if self.mode != "sail" or "://" in str(path):
            ref = table_ref(path)
            if compact:
                self.spark.sql(f"OPTIMIZE {ref}").collect()
            self.spark.sql(f"VACUUM {ref} RETAIN {float(retention_hours)} HOURS").collect()
            return {}
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
        changes (Sail and Delta both skip files no changed key falls in): ZORDER on Spark,
        delta-rs z-order here. Rows do not change: an OPTIMIZE commit."""
        if self.mode != "sail" or "://" in str(path):
            self.spark.sql(f"OPTIMIZE {table_ref(path)} ZORDER BY "
                           f"({', '.join(quote(c) for c in columns)})").collect()
            return
        from deltalake import DeltaTable

        DeltaTable(str(path)).optimize.z_order(  # sorts spill to disk past 512 MB
            columns, target_size=TARGET_FILE_BYTES, max_spill_size=512 * 2**20,
            writer_properties=_writer_properties())

    def register(self, catalog: str, schema: str, name: str, path: str) -> str:
        """Make a Delta table reachable by name; returns the name. Sail's catalog lives in its
        session only and has no other catalogs: there, `catalog` is left out."""
        parts = [schema] if self.mode == "sail" or not catalog else [catalog, schema]
        namespace = ".".join(quote(p) for p in parts)
        self.spark.sql(f"CREATE SCHEMA IF NOT EXISTS {namespace}").collect()
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS {namespace}.{quote(name)} USING DELTA "
                       f"LOCATION {string_literal(str(path))}").collect()
        return ".".join([*parts, name])

    def stop(self) -> None:
        """Stop what this engine started; an `active` session belongs to its host (Databricks)."""
        try:
            if self.mode != "active":
                self.spark.stop()
        finally:
            if self._server is not None:
                self._server.stop()
                self._server = None


def _marked():
    from deltalake import CommitProperties

    return CommitProperties(custom_metadata={"userMetadata": EVOLVE_MARK})


def _predicate(where: list[tuple[str, str, str]], quote_name) -> str:
    """Conditions on columns, values as SQL literals (the same in Spark SQL and DataFusion)."""
    assert all(op in ("<", "=", "<=", "IS") for _, op, _ in where)
    return " AND ".join(f"{quote_name(c)} {op} {_literal(v)}" for c, op, v in where) or "TRUE"


def _literal(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    return string_literal(str(value))


def _df_quote(name: str) -> str:
    """An identifier in delta-rs (DataFusion) SQL."""
    return '"' + name.replace('"', '""') + '"'


def _stats_configuration(schema: pa.Schema) -> dict | None:
    """Keep decimals wider than 64 bits out of file statistics: delta-rs 1.6 writes their
    min/max clamped to 2^63-1, which breaks data skipping, and Sail 0.7 then even reads a
    column whose min equals its max as that wrong value (BIGINT UNSIGNED max became 2^63-1)."""
    wide = {f.name for f in schema if pa.types.is_decimal(f.type) and f.type.precision > 18}
    if not wide:
        return None
    kept = ",".join(quote(f.name) for f in schema if f.name not in wide)
    return {"delta.dataSkippingStatsColumns": kept}


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema, prefer_timestamp_ntz=True)  # naive timestamps are NTZ


def start(mode: str = "sail", url: str = "") -> Engine:
    mode = mode or "sail"
    if mode == "sail":
        return _start_sail()
    if mode == "remote":
        if not url.startswith("sc://"):
            raise CdcError("engine mode `remote` needs engine.url (or --engine-url) as sc://host:port")
        from pyspark.sql import SparkSession

        return Engine(mode, _configure(SparkSession.builder.remote(url).create()))
    if mode == "active":
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise CdcError("engine mode `active` needs a running SparkSession (e.g. a Databricks "
                           "job); use `sail` to run locally")
        return Engine(mode, _configure(spark))
    if mode == "local":
        return _start_local()
    raise CdcError(f"unknown engine mode `{mode}` (sail, remote, active, local)")


def _start_sail() -> Engine:
    os.environ.setdefault("RUST_LOG", "warn")  # Sail logs each Delta commit retry as an ERROR line
    from pysail.spark import SparkConnectServer
    from pyspark.sql import SparkSession

    server = SparkConnectServer(ip="127.0.0.1", port=0)
    server.start(background=True)
    _, port = server.listening_address
    # create(), not getOrCreate(): the latter hands back any session already active in this
    # process, whatever its URL, and stopping it would stop that other engine's session.
    spark = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").create()
    return Engine("sail", _configure(spark), server)


def _start_local() -> Engine:
    try:
        from delta import configure_spark_with_delta_pip
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise CdcError(f"engine mode `local` needs pyspark with a JVM and delta-spark: {exc}") from None
    builder = (SparkSession.builder.master("local[*]").appName("cdc-sql")
               .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
               .config("spark.sql.catalog.spark_catalog",
                       "org.apache.spark.sql.delta.catalog.DeltaCatalog"))
    try:  # downloads the Delta jars from Maven unless spark.jars already names them
        spark = configure_spark_with_delta_pip(builder).getOrCreate()
    except Exception as exc:  # noqa: BLE001 - JVM start failures come in many types
        raise CdcError("engine mode `local` could not start a JVM Spark with Delta (it needs Java "
                       f"and the Delta jars from Maven or spark.jars): {str(exc).splitlines()[0]}") from None
    return Engine("local", _configure(spark))


def _configure(spark):
    import udfs

    for key, value in SESSION_CONF.items():
        spark.conf.set(key, value)
    udfs.register(spark)
    return spark


def _operation(operation, parameters, mark) -> str:
    if mark == EVOLVE_MARK:
        return EVOLVE_MARK
    if operation == "MERGE" and any(guard in str(parameters) for guard in _OWN_MERGE_GUARDS):
        return OWN_MERGE
    return str(operation)
