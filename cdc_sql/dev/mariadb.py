"""A throwaway MariaDB server in a temp dir: for the demo and the integration tests.

It runs Debian's `mariadbd` on a free loopback port with the binlog settings cdc-sql needs
(docs/architecture.md), and is stopped by PID. Nothing here is used by the pipeline itself.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pymysql

BINLOG_FLAGS = [
    "--log-bin=binlog",
    "--binlog-format=ROW",
    "--binlog-row-image=FULL",
    "--binlog-row-metadata=FULL",
    "--server-id=1",
]
USER, PASSWORD = "cdc", "cdc-secret"


class MariaDBNotInstalled(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary(name: str) -> str:
    path = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    if not path:
        raise MariaDBNotInstalled(
            f"{name} not found: install Debian's mariadb-server (`scripts/setup` does it)"
        )
    return path


@dataclass
class MariaDB:
    """One private server. Use as a context manager, or call start()/stop()."""

    extra_flags: list[str] = field(default_factory=list)
    root: Path | None = None
    port: int = 0
    process: subprocess.Popen | None = None

    @property
    def socket_path(self) -> str:
        return str(self.root / "mysqld.sock")

    def start(self, timeout: float = 60.0) -> "MariaDB":
        self.root = Path(tempfile.mkdtemp(prefix="cdc-sql-mariadb-"))
        data = self.root / "data"
        self.port = self.port or _free_port()
        run_as_root = ["--user=root"] if os.geteuid() == 0 else []
        # its own tmpdir, as the server's below: two bootstraps at once in a shared /tmp
        # deleted each other's temporary tables ("Unknown table 'mysql.tmp_user_sys'")
        installed = subprocess.run(
            [_binary("mariadb-install-db"), "--no-defaults", f"--datadir={data}",
             f"--tmpdir={self.root}", "--auth-root-authentication-method=normal",
             "--skip-test-db", *run_as_root],
            capture_output=True, text=True,
        )
        if installed.returncode != 0:
            raise RuntimeError(f"mariadb-install-db exited with {installed.returncode}:\n"
                               f"{(installed.stdout + installed.stderr)[-2000:]}")
        self._launch()
        self._wait_ready(timeout)
        with pymysql.connect(unix_socket=self.socket_path, user="root", autocommit=True) as conn:
            with conn.cursor() as cur:
                cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (USER, PASSWORD))
                cur.execute("GRANT ALL PRIVILEGES ON *.* TO %s@'%%' WITH GRANT OPTION", (USER,))
        return self

    def _launch(self) -> None:
        run_as_root = ["--user=root"] if os.geteuid() == 0 else []
        self.process = subprocess.Popen(
            [_binary("mariadbd"), "--no-defaults", f"--datadir={self.root / 'data'}",
             f"--socket={self.socket_path}", f"--port={self.port}", "--bind-address=127.0.0.1",
             f"--pid-file={self.root / 'mysqld.pid'}", f"--log-error={self.root / 'error.log'}",
             # its own tmpdir: a server starting deletes every `#sql*` file of its tmpdir,
             # which in a shared /tmp are the temporary tables other servers are using
             f"--tmpdir={self.root}",
             "--skip-name-resolve", "--innodb-buffer-pool-size=256M",
             "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
             "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0",
             *BINLOG_FLAGS, *run_as_root, *self.extra_flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )

    def restart(self, crash: bool = False, down_seconds: float = 0.0,
                timeout: float = 60.0) -> None:
        """Stop the server (SIGKILL when `crash`, else a clean shutdown) and start it again on
        the same data and port: clients see their connections drop, then come back."""
        os.killpg(self.process.pid, signal.SIGKILL if crash else signal.SIGTERM)
        self.process.wait(timeout=60)
        time.sleep(down_seconds)
        self._launch()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                log = (self.root / "error.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"mariadbd exited with {self.process.returncode}:\n{log}")
            try:
                pymysql.connect(unix_socket=self.socket_path, user="root").close()
                return
            except pymysql.err.OperationalError:
                time.sleep(0.1)
        raise TimeoutError(f"mariadbd did not accept connections within {timeout}s")

    # -- replication, for failover tests --------------------------------------------------------
    def replicate_from(self, primary: "MariaDB") -> None:
        """Make this server a GTID replica of `primary`, both binlogs starting empty (start
        both with `--log-slave-updates --gtid-strict-mode=1` and server ids of their own)."""
        for server in (primary, self):
            server.execute("RESET MASTER")
        self.execute("SET GLOBAL gtid_slave_pos = ''",
                      f"CHANGE MASTER TO master_host='127.0.0.1', master_port={primary.port}, "
                      f"master_user='{USER}', master_password='{PASSWORD}', "
                      f"master_use_gtid=slave_pos",
                      "START SLAVE")

    def caught_up_with(self, primary: "MariaDB", timeout: float = 60) -> None:
        """Wait until this replica has applied everything in `primary`'s binlog."""
        (position,), = primary.query("SELECT @@global.gtid_binlog_pos")
        (waited,), = self.query("SELECT MASTER_GTID_WAIT(%s, %s)", (position, timeout))
        if waited != 0:
            raise TimeoutError(f"the replica did not reach {position} within {timeout}s")

    def promote(self) -> None:
        """Stop replicating: this server is the primary now."""
        self.execute("STOP SLAVE", "RESET SLAVE ALL")

    def kill(self) -> None:
        """SIGKILL: the server dies as a crashed primary does."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)

    def purge_binlogs(self, timeout: float = 30.0) -> str:
        """Start a new binlog file and purge every older one (as a retention policy would);
        returns the file left. MariaDB keeps a file until InnoDB has checkpointed what it
        holds, so this flushes and tries again until it is gone."""
        deadline = time.monotonic() + timeout
        while True:
            self.execute("FLUSH BINARY LOGS")
            last = self.query("SHOW BINARY LOGS")[-1][0]
            self.execute(f"PURGE BINARY LOGS TO '{last}'")
            if len(self.query("SHOW BINARY LOGS")) == 1:
                return last
            if time.monotonic() > deadline:
                raise RuntimeError(f"binlogs before {last} were not purged")
            time.sleep(0.2)

    def connect(self, db: str | None = None, **kwargs) -> pymysql.connections.Connection:
        settings = {"autocommit": True, **kwargs}
        return pymysql.connect(host="127.0.0.1", port=self.port, user=USER, password=PASSWORD,
                               database=db, **settings)

    def execute(self, *statements: str, db: str | None = None) -> None:
        with self.connect(db) as conn, conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)

    def query(self, sql: str, args=None, db: str | None = None) -> list[tuple]:
        with self.connect(db) as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "MariaDB":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
