"""The lake's table operations through the engine's own Spark SQL (lake/tables.py says when)."""
from __future__ import annotations

import logging
from contextlib import nullcontext
from typing import Callable, ContextManager, Iterable

import pyarrow as pa

from cdc_sql.lake.tables import (EVOLVE_MARK, TableLayout, literal, operation, predicate,
                                 spark_schema, table_ref)
from cdc_sql.sql import quote

log = logging.getLogger("cdc_sql")
_MAX_SLICE_BYTES = 32 * 2**20  # of an Arrow batch sent to the engine


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

    def table_id(self, path: str) -> str | None:
        """The table's id (Delta's metaData.id); None when the engine finds no table there."""
        try:
            row = self.spark.sql(f"DESCRIBE DETAIL {table_ref(path)}").select("id").first()
        except Exception:  # noqa: BLE001 - any engine's "not a Delta table"
            return None
        return str(row["id"]) if row is not None and row["id"] else None

    def version(self, path: str) -> int | None:
        if not self.engine.describes_history:
            return None
        return int(self.spark.sql(f"DESCRIBE HISTORY {table_ref(path)} LIMIT 1").collect()[0][0])

    def history(self, path: str, after_version: int) -> list[tuple[int, str, str]] | None:
        """None when this engine cannot tell (Sail has no DESCRIBE HISTORY)."""
        if not self.engine.describes_history:
            return None
        rows = [(r["version"], r["operation"], r["operationParameters"], r["userMetadata"])
                for r in self.spark.sql(f"DESCRIBE HISTORY {table_ref(path)}").collect()]
        return sorted((int(v), operation(op, params, mark), str((params or {}).get("version", "")))
                      for v, op, params, mark in rows if int(v) > after_version)

    def schema(self, path: str) -> pa.Schema:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(self.engine.read(path).schema)

    def create_arrow_table(self, path: str, schema: pa.Schema,
                           properties: dict | None = None) -> None:
        if not self.exists(path):
            self.engine.append(self.spark.createDataFrame([], spark_schema(schema)), path,
                               properties)

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
                   where: list[tuple[str, str, object]] | None = None,
                   each_file_once: bool = False) -> pa.Table:
        """The rows, read by the engine (`each_file_once` is delta-rs's to keep)."""
        df = self.engine.read(path)
        if where:
            df = df.where(predicate(where, quote))
        return (df.select(*columns) if columns else df).toArrow()

    def replace_rows(self, path: str, table: pa.Table, schema: pa.Schema, where: str) -> None:
        self.spark.createDataFrame(table, spark_schema(schema)).write.format("delta") \
            .mode("overwrite").option("replaceWhere", where).save(str(path))

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

    def reshape(self, path: str, widen: dict, add: list[tuple],
                partitions: list[str] | None = None) -> None:
        from pyspark.sql import functions as F

        if partitions is None:  # as it was (none where the engine has no DESCRIBE DETAIL)
            partitions = list(self._detail(path, "partitionColumns")[0] or ()) \
                if self.engine.describes_history else []
        table = self.engine.read(path)
        table.select(*(F.col(c).cast(widen[c]).alias(c) if c in widen else F.col(c)
                       for c in table.columns),
                     *((F.col(source) if source else F.lit(None)).cast(t).alias(name)
                       for name, t, source in add)) \
            .write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
            .partitionBy(*partitions) \
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

    file_rows = file_bytes

    def plain_files(self, path: str) -> list[str] | None:
        return None  # the engine's tables: not read file by file here

    def data_files(self, path: str, column: str) -> list[tuple[str, object, object]]:
        raise NotImplementedError("merges_here is False: nothing is merged here")

    def replace_files(self, path: str, removed: list[str], added: list,
                      schema: pa.Schema) -> None:
        raise NotImplementedError("merges_here is False: nothing is merged here")

    def read_within(self, path: str, columns: list[str],
                    within: tuple[str, object, object]) -> pa.Table:
        raise NotImplementedError("merges_here is False: nothing is merged here")

    def scan(self, path: str, columns: list[str], where: list[tuple[str, str, object]],
             serial: bool = False) -> pa.RecordBatchReader:
        raise NotImplementedError("merges_here is False: nothing is merged here")

    def create_from_streams(self, path: str, schema: pa.Schema,
                            streams: list[Callable[[], Iterable[pa.RecordBatch]]],
                            properties: dict | None = None) -> None:
        """Created empty, then the rows appended (two commits: a small table's first read in
        bronze, splits.creating_groups; a run that died between them reads it again)."""
        self.create_arrow_table(path, schema, properties)
        for stream in streams:
            self.append_arrow(path, stream(), schema)

    def create_with_files(self, path: str, schema: pa.Schema, actions: list,
                          properties: dict | None = None) -> None:
        raise NotImplementedError("merges_here is False: nothing is merged here")

    def properties(self, path: str) -> dict[str, str]:
        return dict(self._detail(path, "properties")[0] or {})

    def set_properties(self, path: str, chosen: dict[str, str]) -> None:
        pairs = ", ".join(f"{literal(k)} = {literal(v)}" for k, v in chosen.items())
        self.spark.sql(f"ALTER TABLE {table_ref(path)} SET TBLPROPERTIES ({pairs})").collect()

    def merge_changes(self, path: str, changes: pa.Table, key: list[str],
                      columns: list[str]) -> None:
        raise NotImplementedError("merges_here is False: silver's SQL MERGE")

    def cluster(self, path: str, columns: list[str]) -> None:
        """A Z-order by `columns`; a table with Delta's clustering feature refuses ZORDER BY
        (even after CLUSTER BY NONE): a plain OPTIMIZE, which clusters it by its own CLUSTER
        BY columns, or compacts it when it has none."""
        if not self.engine.optimizes:
            log.warning("%s: this engine cannot cluster Delta tables; skipped", path)
            return
        if "clustering" in self._detail(path, "tableFeatures")[0]:
            self.recluster(path)
            return
        self.spark.sql(f"OPTIMIZE {table_ref(path)} ZORDER BY "
                       f"({', '.join(quote(c) for c in columns)})").collect()

    def layout(self, path: str) -> TableLayout | None:
        """In one DESCRIBE DETAIL (a round trip, and a read of the table's log, on an engine
        in another process); None: no table there. An engine without DESCRIBE DETAIL (Sail)
        tells neither properties nor partitions, and clusters nothing."""
        if not self.engine.describes_history:
            return TableLayout(None, None, []) if self.exists(path) else None
        try:
            row = self._detail(path, "properties", "partitionColumns", "clusteringColumns")
        except Exception:  # noqa: BLE001 - any engine's "not a Delta table"
            return None
        if row is None:
            return None
        return TableLayout(dict(row["properties"] or {}), list(row["partitionColumns"] or ()),
                           list(row["clusteringColumns"] or ()))

    def alter_clustering(self, path: str, columns: tuple[str, ...]) -> None:
        """ALTER TABLE CLUSTER BY `columns` (NONE for none): Delta 4 turns liquid clustering
        on for an unpartitioned table created without it, and the files stay as they are."""
        listed = ", ".join(quote(c) for c in columns) if columns else None
        self.spark.sql(f"ALTER TABLE {table_ref(path)} CLUSTER BY "
                       f"{f'({listed})' if listed else 'NONE'}").collect()

    def recluster(self, path: str, full: bool = False) -> None:
        """OPTIMIZE a liquid-clustered table: its files not clustered yet by its columns;
        `full`, every file (after its columns changed)."""
        self.spark.sql(f"OPTIMIZE {table_ref(path)}{' FULL' if full else ''}").collect()

    def _detail(self, path: str, *columns: str):
        return self.spark.sql(f"DESCRIBE DETAIL {table_ref(path)}").select(*columns).first()

    def _marked_sql(self, statement: str) -> None:
        # Session-wide: a MERGE another thread commits meanwhile carries the mark too, which
        # is true of it as well (every commit of this session is cdc-sql's own).
        self.spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", EVOLVE_MARK)
        try:
            self.spark.sql(statement).collect()
        finally:
            self.spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
