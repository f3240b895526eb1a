"""Spark engines in processes of their own, on loopback: for the tests and the benchmarks.

- `StandaloneCluster`: a Spark standalone master and workers, started from pyspark's own
  classes (`bin/spark-class`), with a Spark Connect server (the connect jar ships with pyspark
  4.1) whose driver runs the cluster's jobs, with Delta Lake's jars (cdc_sql/jars.py).
- `ConnectServer(master="local[2]")`: the same server over a local Spark of its own.
- `SailServer`: `sail spark server`, Sail's Spark Connect server (`SAIL_MODE=local-cluster`:
  its driver and workers in one process).

Each is a context manager that starts its processes in a session of their own and stops them
by process group; a process that does not answer within its timeout is stopped and reported in
one line naming its log. Nothing here is used by a pipeline.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from cdc_sql import jars
from cdc_sql.engine import LOCAL_CONF, LOCAL_JAVA_OPTIONS, s3a_settings
from cdc_sql.errors import CdcError

CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def need_java() -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise CdcError("a JVM Spark needs Java 17 or later: install it (Debian: apt-get install "
                       "openjdk-17-jre-headless) or set JAVA_HOME")


class _Processes:
    """Processes started in sessions of their own, each logging to a file in `self.dir`."""

    def __init__(self, name: str):
        self.dir = Path(tempfile.mkdtemp(prefix=f"cdc-sql-{name}-"))
        self.processes: list[subprocess.Popen] = []

    def spawn(self, name: str, argv: list[str], env: dict | None = None) -> Path:
        log = self.dir / f"{name}.log"
        with open(log, "wb") as out:
            self.processes.append(subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})},
                cwd=self.dir, start_new_session=True))
        return log

    def wait(self, what: str, ready, log: Path, timeout: float) -> None:
        """Until `ready()` is true; else stop everything and say which process did not
        answer, and where its log is."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            dead = [p for p in self.processes if p.poll() is not None]
            if dead:
                break
            time.sleep(0.2)
        tail = _tail(log)
        self.stop()
        raise CdcError(f"{what} did not answer within {timeout:.0f} s (its log: {log}"
                       + (f"; last line: {tail}" if tail else "") + ")")

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for process in reversed(self.processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes = []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _tail(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class ConnectServer(_Processes):
    """A JVM Spark Connect server with Delta Lake on `master` (`local[N]`, or a standalone
    cluster's `spark://` URL); `url` is what engine mode `remote` takes."""

    def __init__(self, master: str = "local[2]", conf: dict | None = None, name: str = "connect"):
        super().__init__(name)
        self.master, self.conf, self.port = master, conf or {}, free_port()

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self) -> "ConnectServer":
        import pyspark

        need_java()
        # S3A from this environment (the server's processes inherit it, credentials too)
        conf = {**LOCAL_CONF, **s3a_settings(os.environ),
                "spark.connect.grpc.binding.port": str(self.port),
                "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false",
                "spark.driver.extraJavaOptions": LOCAL_JAVA_OPTIONS,
                "spark.executor.extraJavaOptions": LOCAL_JAVA_OPTIONS,
                # Python on the executors: this environment's, importing this cdc_sql and udfs
                "spark.pyspark.python": sys.executable,
                "spark.executorEnv.PYTHONPATH": _source_root(), **self.conf}
        argv = [str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_CLASS,
                "--name", "cdc-sql Spark Connect", "--master", self.master,
                "--jars", ",".join(jars.delta_jars(pyspark.__version__))]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        log = self.spawn("connect-server", [*argv, "spark-internal"],
                         env={"PYTHONPATH": _source_root(), "PYSPARK_PYTHON": sys.executable})
        self.wait(f"the Spark Connect server ({self.url}, master {self.master})",
                  lambda: _listening(self.port), log, timeout=120)
        return self


class StandaloneCluster(_Processes):
    """A Spark standalone master and `workers` workers (one core each) on loopback, and a
    Spark Connect server with Delta Lake whose jobs run on them."""

    def __init__(self, workers: int = 2, worker_memory: str = "1g"):
        super().__init__("cluster")
        self.workers, self.worker_memory = workers, worker_memory
        self.port, self.ui_port = free_port(), free_port()
        self.connect: ConnectServer | None = None

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        assert self.connect is not None
        return self.connect.url

    def start(self) -> "StandaloneCluster":
        need_java()
        spark_class = str(spark_home() / "bin" / "spark-class")
        log = self.spawn("master", [spark_class, "org.apache.spark.deploy.master.Master",
                                    "--host", "127.0.0.1", "--port", str(self.port),
                                    "--webui-port", str(self.ui_port)])
        self.wait(f"the Spark master ({self.master})", lambda: _listening(self.port), log, 60)
        for n in range(self.workers):
            log = self.spawn(f"worker-{n}", [
                spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                "--cores", "1", "--memory", self.worker_memory, "--webui-port", "0",
                "--work-dir", str(self.dir / f"work-{n}"), self.master])
        self.wait(f"the Spark standalone workers of {self.master}",
                  lambda: self.alive_workers() >= self.workers, log, 60)
        self.connect = ConnectServer(self.master, {
            "spark.executor.memory": "768m", "spark.executor.cores": "1",
            "spark.cores.max": str(self.workers)}, name="cluster-connect").start()
        return self

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/",
                                        timeout=2) as answer:
                return int(json.load(answer).get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def stop(self) -> None:
        if self.connect is not None:
            self.connect.stop()
            shutil.rmtree(self.connect.dir, ignore_errors=True)
            self.connect = None
        super().stop()


class SailServer(_Processes):
    """`sail spark server` in a process of its own (SAIL_MODE=local-cluster by default)."""

    def __init__(self, mode: str = "local-cluster"):
        super().__init__("sail")
        self.mode, self.port = mode, free_port()

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self) -> "SailServer":
        sail = Path(sys.executable).parent / "sail"
        log = self.spawn("sail-server", [str(sail if sail.exists() else "sail"), "spark", "server",
                                         "--ip", "127.0.0.1", "--port", str(self.port)],
                         env={"SAIL_MODE": self.mode, "RUST_LOG": "warn"})
        self.wait(f"the Sail server ({self.url})", lambda: _listening(self.port), log, 60)
        return self


def _source_root() -> str:
    """The folder holding this cdc_sql and udfs (executors import them)."""
    return str(Path(__file__).resolve().parents[2])
