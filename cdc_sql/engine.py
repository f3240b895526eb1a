"""Spark sessions, and the one place that knows how engines differ.

Modes:
- `sail`   (default) an in-process Sail Spark Connect server (pysail): no JVM, Delta built in.
- `remote` any Spark Connect URL (`sc://host:port`), e.g. a Spark 4 cluster with Delta.
- `active` the SparkSession already running, as in a Databricks job.
- `local`  a JVM Spark with delta-spark; needs the Delta jars from Maven or `spark.jars`.
Everything else speaks portable Spark SQL through the session this module returns. Each mode
imports its own libraries when it starts (pysail, delta-spark and pyspark's session are optional
or heavy), and `udfs` only once a session needs them.
"""
from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

from cdc_sql.config.model import ENGINE_MODES
from cdc_sql.errors import CdcError
from cdc_sql.sql import quote, string_literal

log = logging.getLogger(__name__)
# No `${var}` substitution in SQL text: a projection must not read the job's environment
# (`${env:AWS_SECRET_ACCESS_KEY}`) or the session's settings (docs/security.md).
SESSION_CONF = {"spark.sql.session.timeZone": "UTC", "spark.sql.variable.substitute": "false"}
MODES = ENGINE_MODES  # the one list, in the config model


@dataclass
class Engine:
    """A Spark session and what this engine can do; table operations that are not queries live
    in lake/tables.py, chosen once per target."""

    mode: str
    session: object = field(repr=False)  # a SparkSession; None or a Future while Sail starts
    _server: object = field(default=None, repr=False)
    _boot: object = field(default=None, repr=False)  # starts the session (Sail)

    @property
    def spark(self):
        """The session: started now if nobody prepared it, waited for if it is starting."""
        if self.session is None:
            self.session = self._boot()
        elif isinstance(self.session, Future):
            self.session = self.session.result()
        return self.session

    def prepare(self) -> None:
        """Start the session in the background, if this engine starts on first use."""
        if self.session is not None:
            return
        session: Future = Future()

        def boot() -> None:
            try:
                session.set_result(self._boot())
            except BaseException as exc:  # noqa: BLE001 - raised to whoever uses the session
                session.set_exception(exc)

        self.session = session
        threading.Thread(target=boot, name="engine-start", daemon=True).start()

    @property
    def describes_history(self) -> bool:
        """Sail 0.7 has no DESCRIBE HISTORY."""
        return self.mode != "sail"

    @property
    def optimizes(self) -> bool:
        """Sail 0.7 has no OPTIMIZE or VACUUM (delta-rs does them where it reaches the table)."""
        return self.mode != "sail"

    def read(self, path: str, version: int | None = None):
        """A Delta table, as of `version` if given."""
        reader = self.spark.read.format("delta")
        if version is None:
            return reader.load(str(path))
        if self.mode == "sail":
            return _sail_version(self.spark, str(path), version)
        return reader.option("versionAsOf", int(version)).load(str(path))

    def append(self, df, path: str, properties: dict | None = None) -> None:
        """Append rows; `properties` are set on the table if this write creates it."""
        writer = df.write.format("delta").mode("append")
        for key, value in (properties or {}).items():
            writer = writer.option(key, value)
        writer.save(str(path))

    def replace(self, df, path: str, mark: str) -> None:
        """Overwrite the table with `df`'s rows and columns in one commit, marked `mark`:
        readers see the old rows or the new ones, never an empty or half table."""
        df.write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
            .option("userMetadata", mark).save(str(path))

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
            if self.session is None or (isinstance(self.session, Future)
                                        and self.session.exception() is not None):
                return
            if self.mode != "active":
                self.spark.stop()
        finally:
            if self._server is not None:
                self._server.stop()
                self._server = None


def _sail_version(spark, path: str, version: int):
    """A table's rows as of `version`, read from the data files delta-rs lists for it: Sail 0.7
    fails to time-travel to a version older than the table's last checkpoint unless a checkpoint
    sits at it or just before it ("Missing commit file: expected version 0, found N"; Sail writes
    a checkpoint every 10 commits). Sail writes no deletion vectors, column mapping or partitions
    into cdc-sql's tables, so those files, read with that version's schema, are the version."""
    import json

    from deltalake import DeltaTable
    from pyspark.sql.types import StructField, StructType

    table = DeltaTable(path, version=int(version))
    schema = StructType.fromJson(json.loads(table.schema().to_json()))
    schema = StructType([StructField(f.name, f.dataType) for f in schema.fields])  # no metadata:
    # Sail cannot parse a schema whose fields carry Spark's metadata key
    files = table.file_uris()
    if not files:
        return spark.createDataFrame([], schema)
    return spark.read.schema(schema).parquet(*files)


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
    raise CdcError(f"unknown engine mode `{mode}` ({', '.join(MODES)})")


def _start_sail() -> Engine:
    """Sail starts on first use, or in the background from `Engine.prepare()` (1-2 s of imports
    and server start, overlapped with reading the source)."""
    # Sail logs each Delta commit retry as an ERROR line, and warns at every exit that it
    # aborts its session actor's tasks (`aborting N task(s) for SessionManagerActor`).
    os.environ.setdefault("RUST_LOG", "warn,sail_common::actor=error")
    engine = Engine("sail", None)

    def boot() -> object:
        from pysail.spark import SparkConnectServer
        from pyspark.sql import SparkSession

        engine._server = SparkConnectServer(ip="127.0.0.1", port=0)
        engine._server.start(background=True)
        _, port = engine._server.listening_address
        # create(), not getOrCreate(): the latter hands back any session already active in
        # this process, whatever its URL, and stopping it would stop that engine's session.
        return _configure(SparkSession.builder.remote(f"sc://127.0.0.1:{port}").create())

    engine._boot = boot
    return engine


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
