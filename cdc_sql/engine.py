"""Spark sessions, and the one place that knows how engines differ.

Modes say how the session is had:
- `sail`   (default) an in-process Sail Spark Connect server (pysail): no JVM, Delta built in.
- `remote` any Spark Connect URL (`sc://host:port`): a Sail server or cluster, or a JVM Spark
  (a standalone or YARN/Kubernetes cluster) with Delta Lake.
- `active` the SparkSession already running, as in a Databricks job.
- `local`  a JVM Spark (`local[*]`) in this process, with delta-spark's jars (cdc_sql/jars.py).
What the engine can do depends on which engine it is, never on the mode: `probe` asks the
session (`SELECT version(), current_catalog()`: Sail answers with its own version and catalog),
and `start` returns the implementation for it: `SailEngine` (Sail's gaps worked around here) or
`DeltaSparkEngine` (Apache Spark or Databricks with Delta Lake). Everything else speaks portable
Spark SQL through the session. Each mode imports its own libraries when it starts (pysail and
pyspark's classic session are optional or heavy), and `udfs` only once a session needs them.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field

from cdc_sql.config.model import ENGINE_MODES
from cdc_sql.errors import CdcError
from cdc_sql.location import Location
from cdc_sql.sql import inline, quote, string_literal

log = logging.getLogger(__name__)
# No `${var}` substitution in SQL text: a projection must not read the job's environment
# (`${env:AWS_SECRET_ACCESS_KEY}`) or the session's settings (docs/security.md).
SESSION_CONF = {"spark.sql.session.timeZone": "UTC", "spark.sql.variable.substitute": "false"}
MODES = ENGINE_MODES  # the one list, in the config model


_BOOTING = threading.Lock()  # an engine that starts on first use starts once
IN_PROCESS = ("sail", "local")  # modes whose engine runs in this process


def in_process(mode: str) -> bool:
    """Whether the engine of `mode` runs in this process, so shares this machine's file system
    and object-store settings (then delta-rs may carry out the lake's table operations:
    lake/tables.py); `remote` and `active` engines may run anywhere."""
    return mode in IN_PROCESS


@dataclass
class Engine:
    """A Spark session and what the engine behind it can do; table operations that are not
    queries live in lake/tables.py, chosen once per target. Subclasses are the engines
    (`kind`); `mode` says only how the session was had (see the module's docstring)."""

    mode: str
    session: object = field(repr=False)  # a SparkSession; None or a Future while it starts
    _server: object = field(default=None, repr=False)
    _boot: object = field(default=None, repr=False)  # starts the session (Sail)
    version: str = ""  # what the engine says it is (`SELECT version()`)

    kind = "spark"
    describes_history = True  # DESCRIBE HISTORY
    optimizes = True  # OPTIMIZE and VACUUM
    alters_columns = True  # ALTER TABLE ADD COLUMNS
    time_travels = True  # VERSION AS OF any version the log keeps
    catalogs = True  # tables registered by name outlive the session (a metastore, Unity)
    writes_change_data_feed = True  # a table with delta.enableChangeDataFeed (config/layout.py)
    keeps_deletion_vectors = True  # writes, compacts and time-travels them (config/layout.py)
    clusters_liquid = True  # Delta's liquid clustering: CLUSTER BY, plain OPTIMIZE (layout.py)

    @property
    def spark(self):
        """The session: started now if nobody prepared it, waited for if it is starting.
        Once: two tables' merges reaching for it at once started two servers, and the one
        whose server was dropped retried its connection for ten minutes."""
        if self.session is None:
            with _BOOTING:
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

    def sql(self, text: str, args: dict | None = None):
        """A statement with its named parameters (`:name`) bound to `args`."""
        return self.spark.sql(text, args=args or None)

    def describe(self) -> str:
        return f"{self.kind} {self.version}".strip() + f" (engine mode {self.mode})"

    def read(self, path: str, version: int | None = None):
        """A Delta table, as of `version` if given."""
        reader = self.spark.read.format("delta")
        if version is None:
            return reader.load(str(path))
        return reader.option("versionAsOf", int(version)).load(str(path))

    def read_files(self, files: list[str], schema_json: str):
        """The rows of a Delta table's Parquet data files, read as they are with its schema
        (Delta's JSON of it; the fields' metadata left out: Sail cannot parse a schema whose
        fields carry Spark's metadata key)."""
        from pyspark.sql.types import StructField, StructType

        schema = StructType.fromJson(json.loads(schema_json))
        schema = StructType([StructField(f.name, f.dataType) for f in schema.fields])
        if not files:
            return self.spark.createDataFrame([], schema)
        return self.spark.read.schema(schema).parquet(*files)

    def append(self, df, path: str, properties: dict | None = None,
               partitions: list[str] = ()) -> None:
        """Append rows; `properties` are set on the table if this write creates it, and it is
        partitioned by `partitions`."""
        writer = df.write.format("delta").mode("append")
        if partitions:
            writer = writer.partitionBy(*partitions)
        for key, value in (properties or {}).items():
            writer = writer.option(key, value)
        writer.save(str(path))

    def replace(self, df, path: str, mark: str) -> None:
        """Overwrite the table with `df`'s rows and columns in one commit, marked `mark`:
        readers see the old rows or the new ones, never an empty or half table."""
        df.write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
            .option("userMetadata", mark).save(str(path))

    def stage(self, df, path: str) -> None:
        """Write `df` over a scratch table of cdc-sql's own (a MERGE's staged source),
        whatever columns it held before."""
        df.write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
            .save(str(path))

    def add_columns_sql(self, table: str, fields: list) -> str | None:
        """The statement adding nullable columns to a table (None: this engine has none)."""
        columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in fields)
        return f"ALTER TABLE {table} ADD COLUMNS ({columns})"

    def register(self, catalog: str, schema: str, name: str, path: str) -> str:
        """Make a Delta table reachable by name; returns the name."""
        parts = [catalog, schema] if catalog else [schema]
        return self._register(parts, name, path)

    def _register(self, parts: list[str], name: str, path: str) -> str:
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


class DeltaSparkEngine(Engine):
    """Apache Spark (or Databricks) with Delta Lake: every Delta SQL command is there."""

    kind = "spark"

    def sql(self, text: str, args: dict | None = None):
        """Spark 4.1 substitutes parameter markers while parsing, and with Delta's SQL parser
        (4.4) every `:name` stays unbound (UNBOUND_SQL_PARAMETER; in a classic session
        `spark.sql.legacy.parameterSubstitution.constantsOnly` mends it, through Spark Connect
        nothing does). So the values go in as SQL literals of their own types (sql.inline)."""
        return self.spark.sql(inline(text, args) if args else text)

    def append(self, df, path: str, properties: dict | None = None,
               partitions: list[str] = ()) -> None:
        super().append(df, path, {**_column_mapping(df), **(properties or {})}, partitions)

    def stage(self, df, path: str) -> None:
        df.write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
            .options(**_column_mapping(df)).save(str(path))

    def replace(self, df, path: str, mark: str) -> None:
        df.write.format("delta").mode("overwrite").option("overwriteSchema", "true") \
            .options(**_column_mapping(df)).option("userMetadata", mark).save(str(path))


_UNNAMEABLE = set(" ,;{}()\n\t=")  # what Delta Spark refuses in a column name without mapping


def _column_mapping(df) -> dict:
    """Column mapping for a table Delta Spark creates with columns whose names it refuses
    otherwise (a MySQL column `odd col`; Sail and delta-rs take them as they are)."""
    if any(_UNNAMEABLE & set(f.name) for f in df.schema.fields):
        return {"delta.columnMapping.mode": "name"}
    return {}


class SailEngine(Engine):
    """Sail: a Spark Connect server in Rust with its own Delta Lake. It has no ALTER TABLE ADD
    COLUMNS (columns are added by a schema-merging append), OPTIMIZE, VACUUM or DESCRIBE
    HISTORY (delta-rs does maintenance and reads history where it reaches the lake), no catalog
    but its session's, and time travel that fails below its last checkpoint (docs/engines.md,
    "Sail differences", says which version these were measured on)."""

    kind = "sail"
    describes_history = False
    optimizes = False
    alters_columns = False
    time_travels = False
    catalogs = False
    writes_change_data_feed = False
    keeps_deletion_vectors = False  # writes them, but has no OPTIMIZE (docs/engines.md)
    clusters_liquid = False

    def read(self, path: str, version: int | None = None):
        """Sail's `versionAsOf` where a version is asked for: its rows where Sail reads that
        version, else one clear error (it fails at analysis behind a checkpoint), never another
        version's rows. `lake.read_version` reads it from its files where they are its rows."""
        frame = super().read(path, version)
        if version is None:
            return frame
        try:
            frame.schema  # noqa: B018 - analysis: Sail fails here where it cannot read the version
        except Exception as exc:  # noqa: BLE001 - Sail's error, one line of it
            raise CdcError(f"{path}: Sail 0.7 cannot read version {version} of this table, whose "
                           f"files alone are not its rows (deletion vectors, mapped columns or "
                           f"partitions, turned on by Delta Spark) ({_first_line(exc)}): merge "
                           f"it on Delta Spark (engine.mode: local)") from None
        return frame

    def stage(self, df, path: str) -> None:
        """A fresh table each time on a local path: Sail cannot overwrite one whose schema
        gains a column with a table feature."""
        if Location.of(path).local:
            shutil.rmtree(path, ignore_errors=True)
        super().stage(df, path)

    def add_columns_sql(self, table: str, fields: list) -> str | None:
        return None

    def register(self, catalog: str, schema: str, name: str, path: str) -> str:
        """Sail's catalog lives in its session only and has no other catalogs: `catalog` is
        left out."""
        return self._register([schema], name, path)


def known(mode: str) -> type[Engine] | None:
    """The engine a mode gives, where the mode alone says before it starts (`cdc-sql plan`):
    Sail for `sail`, Delta Spark for `local`. A `remote` or `active` session is whichever
    engine answers (`probe`): None."""
    return {"sail": SailEngine, "local": DeltaSparkEngine}.get(mode)


def probe(spark) -> tuple[type[Engine], str]:
    """Which engine a session talks to, and its version, asked of the session itself."""
    try:
        version, catalog = spark.sql("SELECT version(), current_catalog()").collect()[0]
    except Exception as exc:  # noqa: BLE001 - whatever the engine says, said in one line
        raise CdcError(f"the Spark engine did not answer a first query: {_first_line(exc)}") \
            from None
    if catalog == "sail":
        return SailEngine, str(version)
    return DeltaSparkEngine, str(version).split(" ")[0]


def start(mode: str = "sail", url: str = "", conf: dict | None = None) -> Engine:
    """The engine for `mode`; `conf` (engine.conf) are Spark settings for the JVM that mode
    `local` starts: any other engine was started by someone else, with settings of its own."""
    mode = mode or "sail"
    if conf and mode != "local":
        raise CdcError(f"engine.conf sets the JVM Spark cdc-sql starts itself (engine mode "
                       f"local); a `{mode}` engine takes its settings where it is started: "
                       f"remove engine.conf or use engine mode local")
    # Looked up, not imported: pyspark's import takes a tenth of a second, and a run of plain
    # tables seldom starts the engine (run/engine_policy.py). Not a dependency: a Databricks
    # job has its runtime's.
    if importlib.util.find_spec("pyspark") is None:
        raise CdcError(f"engine mode `{mode}` needs pyspark: pip install 'cdc-sql[sail]' (the "
                       f"embedded engine) or 'cdc-sql[spark]' (a Spark of your own)")
    if mode == "sail":
        return _start_sail()
    if mode == "remote":
        return _start_remote(url)
    if mode == "active":
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise CdcError("engine mode `active` needs a running SparkSession (e.g. a Databricks "
                           "job); use `sail` to run locally")
        return _probed(mode, spark)
    if mode == "local":
        return _start_local(conf or {})
    raise CdcError(f"unknown engine mode `{mode}` ({', '.join(MODES)})")


def _probed(mode: str, spark) -> Engine:
    """The implementation for the engine behind `spark`, its session configured."""
    kind, version = probe(spark)
    if kind is DeltaSparkEngine:
        _check_delta(spark, mode)
    return kind(mode, _configure(spark), version=version)


def _check_delta(spark, mode: str) -> None:
    """A JVM Spark without Delta Lake fails every statement on a Delta table: say so once."""
    try:
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
        databricks = spark.conf.get("spark.databricks.clusterUsageTags.sparkVersion", "") or ""
    except Exception:  # noqa: BLE001 - a conf the engine will not tell: assume Delta is there
        return
    if "DeltaSparkSessionExtension" not in extensions and not databricks:
        raise CdcError(f"the Spark behind engine mode `{mode}` has no Delta Lake: start it with "
                       "io.delta.sql.DeltaSparkSessionExtension in spark.sql.extensions and "
                       "org.apache.spark.sql.delta.catalog.DeltaCatalog as spark_catalog "
                       "(docs/engines.md)")


# Every Spark Connect session this process made, kept until it exits: pyspark's
# SparkSession.__del__ closes its client, and with it the pool of release threads every
# session shares. Run by the garbage collector inside another session's gRPC call (a stopped
# engine's session, collected at any allocation), it waits for a release thread that waits
# for that call's lock: the run hangs. Kept, a session is never collected.
_SESSIONS: list = []


def _kept(spark):
    """A Spark Connect session, kept from the garbage collector (_SESSIONS)."""
    _SESSIONS.append(spark)
    return spark


def _start_remote(url: str) -> Engine:
    if not url.startswith("sc://"):
        raise CdcError("engine mode `remote` needs engine.url (or --engine-url) as sc://host:port")
    from pyspark.sql import SparkSession

    _reachable(url)
    try:
        spark = _kept(SparkSession.builder.remote(url).create())
    except Exception as exc:  # noqa: BLE001 - gRPC and pyspark errors alike
        raise CdcError(f"the Spark Connect server at {url} did not answer: "
                       f"{_first_line(exc)}") from None
    return _probed("remote", spark)


def _reachable(url: str, timeout: float = 10.0) -> None:
    """Fail in one line when nothing listens at the URL: Spark Connect's client retries a
    refused connection for minutes."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url.split(";", 1)[0])
    try:
        host, port = parts.hostname or "localhost", parts.port or 15002
    except ValueError as exc:
        raise CdcError(f"engine.url {url}: {exc}") from None
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        raise CdcError(f"the Spark Connect server at {url} does not answer ({exc.strerror or exc}"
                       f"): start it, or check engine.url") from None


def _start_sail() -> Engine:
    """Sail starts on first use, or in the background from `Engine.prepare()` (imports and
    server start, overlapped with reading the source: run/engine_policy.py)."""
    # Sail logs each Delta commit retry as an ERROR line, and warns at every exit that it
    # aborts its session actor's tasks (`aborting N task(s) for SessionManagerActor`).
    os.environ.setdefault("RUST_LOG", "warn,sail_common::actor=error")
    engine = SailEngine("sail", None)

    def boot() -> object:
        from pysail.spark import SparkConnectServer
        from pyspark.sql import SparkSession

        engine._server = SparkConnectServer(ip="127.0.0.1", port=0)
        engine._server.start(background=True)
        _, port = engine._server.listening_address
        # create(), not getOrCreate(): the latter hands back any session already active in
        # this process, whatever its URL, and stopping it would stop that engine's session.
        spark = _configure(_kept(SparkSession.builder.remote(f"sc://127.0.0.1:{port}")
                                 .create()))
        engine.version = str(spark.sql("SELECT version()").collect()[0][0])
        return spark

    engine._boot = boot
    return engine


LOG4J = os.path.join(os.path.dirname(__file__), "log4j2.properties")  # errors only, to stderr
# A JVM Spark of its own in this process: Delta's extension and catalog, the jars setup.sh
# fetched, and settings for one machine running many small statements: Delta replays a
# table's log in 50 tasks by default; Spark keeps 100 compiled classes of generated code,
# fewer than a few tables' windows generate, so each window compiled them all again (Janino,
# then the JIT, a core of it); the parallel collector's barriers cost the statements less
# than G1's (docs/performance.md, "JVM Spark's windows").
LOCAL_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.ui.showConsoleProgress": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.codegen.cache.maxEntries": "4000",
}
LOCAL_JAVA_OPTIONS = "-XX:+UseParallelGC"


def s3a_settings(environ) -> dict:
    """The `spark.hadoop.fs.s3a.*` settings that point a JVM Spark's S3A at the store delta-rs
    reaches from the same environment (docs/operations.md, "Object storage"), and `s3://` URLs
    to S3A as delta-rs reads them (only Databricks and EMR know that scheme otherwise).

    No credential is copied into Spark's settings (they show in its UI and event logs): S3A's
    default chain reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN from
    the environment itself. An endpoint other than AWS's (MinIO, moto, a gateway) is reached
    with path-style requests, as delta-rs's object_store does unless
    AWS_VIRTUAL_HOSTED_STYLE_REQUEST says otherwise."""
    hadoop = {"fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
              "fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A"}
    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION")
    if region:
        hadoop["fs.s3a.endpoint.region"] = region
    endpoint = environ.get("AWS_ENDPOINT_URL") or environ.get("AWS_ENDPOINT")
    if endpoint:
        hadoop["fs.s3a.endpoint"] = endpoint
        virtual = _true(environ.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST"))
        hadoop["fs.s3a.path.style.access"] = "false" if virtual else "true"
        if endpoint.lower().startswith("http://") and _true(environ.get("AWS_ALLOW_HTTP")):
            hadoop["fs.s3a.connection.ssl.enabled"] = "false"
    return {f"spark.hadoop.{key}": value for key, value in hadoop.items()}


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _start_local(conf: dict) -> Engine:
    """A JVM starts on first use, or in the background from `Engine.prepare()` (seconds), like
    Sail: a run whose windows are all merged in this process never starts one. `conf` comes
    last, so a pipeline can set anything (a Hive metastore: docs/engines.md, "Catalogs")."""
    import pyspark

    from cdc_sql import jars

    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise CdcError("engine mode `local` needs Java 17 or later (a JVM Spark): install it "
                       "(Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME")
    delta = jars.delta_jars(pyspark.__version__)  # before any JVM: one line if they are missing
    engine = DeltaSparkEngine("local", None, version=pyspark.__version__)

    def boot() -> object:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.master("local[*]").appName("cdc-sql") \
            .config("spark.jars", ",".join(delta)) \
            .config("spark.driver.extraJavaOptions",
                    f"-Dlog4j2.configurationFile=file:{LOG4J} {LOCAL_JAVA_OPTIONS}")
        for key, value in {**LOCAL_CONF, **s3a_settings(os.environ), **conf}.items():
            builder = builder.config(key, value)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # one machine: no hostname warning
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # UDF workers: this Python
        try:
            spark = builder.getOrCreate()
        except Exception as exc:  # noqa: BLE001 - JVM start failures come in many types
            raise CdcError(f"engine mode `local` could not start a JVM Spark with Delta: "
                           f"{_first_line(exc)}") from None
        spark.sparkContext.setLogLevel("ERROR")
        return _configure(spark)

    engine._boot = boot
    return engine


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _configure(spark):
    import udfs

    for key, value in SESSION_CONF.items():
        spark.conf.set(key, value)
    udfs.register(spark)
    return spark
