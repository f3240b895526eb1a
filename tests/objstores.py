"""Object stores for the tests: real HTTP servers on loopback, each from a registry, started
once per session and stopped at its end.

- S3: moto's server (PyPI `moto[server]`), which honours `If-None-Match` and `If-Match` puts.
- Azure Blob / ADLS: Azurite (npm `azurite`, installed by scripts/setup.sh under .venv/azurite),
  reached as `abfss://<container>@devstoreaccount1.dfs.core.windows.net/...` with
  `AZURE_STORAGE_USE_EMULATOR`.

Each test gets a bucket (container) of its own, and the environment delta-rs, Sail and obstore
read their settings from (`AWS_*`, `AZURE_*`), set for the test only.

`lake_root`: where `make_pipeline` puts the lake: `tmp_path/lake`, or with
`CDC_SQL_TEST_STORE=s3` (or `azure`) a fresh bucket on that emulator, so that whole test
modules run again against an object store (scripts/test.sh). Tests that look at a local lake's
files are marked `local_lake` and skipped there.
"""
from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import itertools
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STORE = os.environ.get("CDC_SQL_TEST_STORE", "")  # "", "s3" or "azure"
_buckets = itertools.count(1)
if STORE:  # runs the tests kill leave their lease: it expires in 0.3 s, not 60
    os.environ.setdefault("CDC_SQL_LEASE_SECONDS", "0.3")
# Azurite's well-known development account (public, in Azure's own documentation)
AZURE_ACCOUNT = "devstoreaccount1"
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, process: subprocess.Popen, log: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the emulator exited: {log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the emulator did not listen within {seconds} s: {log.read_text()[-2000:]}")


@dataclass
class Emulator:
    """A running store: how to reach it (`env`), make a bucket, and name a lake in it."""

    kind: str
    port: int
    process: subprocess.Popen
    workdir: Path
    env: dict = field(default_factory=dict)

    def bucket(self) -> str:
        name = f"lake{os.getpid()}x{next(_buckets)}"
        if self.kind == "s3":
            _http("PUT", f"http://127.0.0.1:{self.port}/{name}")
        else:
            _azure_create_container(self.port, name)
        return name

    def url(self, bucket: str, path: str = "lake") -> str:
        if self.kind == "s3":
            return f"s3://{bucket}/{path}"
        return f"abfss://{bucket}@{AZURE_ACCOUNT}.dfs.core.windows.net/{path}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _http(method: str, url: str, headers: dict | None = None) -> int:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


def _azure_create_container(port: int, name: str) -> None:
    """Create a container through Azurite's REST API, signed with the development key
    (SharedKey: the canonical headers and resource, HMAC-SHA256)."""
    headers = {"x-ms-date": email.utils.formatdate(usegmt=True), "x-ms-version": "2021-08-06",
               "Content-Length": "0"}
    canonical = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()) if k.startswith("x-ms-"))
    to_sign = "PUT\n" + "\n" * 11 + canonical + \
        f"/{AZURE_ACCOUNT}/{AZURE_ACCOUNT}/{name}\nrestype:container"
    signature = base64.b64encode(hmac.new(base64.b64decode(AZURE_KEY), to_sign.encode(),
                                          hashlib.sha256).digest()).decode()
    headers["Authorization"] = f"SharedKey {AZURE_ACCOUNT}:{signature}"
    _http("PUT", f"http://127.0.0.1:{port}/{AZURE_ACCOUNT}/{name}?restype=container", headers)


def start_moto() -> Emulator:
    port, workdir = _free_port(), Path(tempfile.mkdtemp(prefix="cdc-sql-moto-"))
    log = workdir / "moto.log"
    binary = Path(sys.executable).with_name("moto_server")
    process = subprocess.Popen([str(binary), "-H", "127.0.0.1", "-p", str(port)],
                               stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    _wait_listening(port, process, log)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ALLOW_HTTP": "true",
           "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": "us-east-1"}
    return Emulator("s3", port, process, workdir, env)


def azurite_binary() -> str:
    installed = ROOT / ".venv" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
    found = str(installed) if installed.exists() else shutil.which("azurite-blob")
    if not found:
        raise RuntimeError("Azurite is not installed: run scripts/setup.sh (npm install "
                           "--prefix .venv/azurite azurite)")
    return found


def start_azurite() -> Emulator:
    port, workdir = _free_port(), Path(tempfile.mkdtemp(prefix="cdc-sql-azurite-"))
    log = workdir / "azurite.log"
    process = subprocess.Popen([azurite_binary(), "--blobHost", "127.0.0.1", "--blobPort",
                                str(port), "--location", str(workdir / "data"), "--silent",
                                "--skipApiVersionCheck", "--loose"],
                               stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    _wait_listening(port, process, log)
    env = {"AZURE_STORAGE_USE_EMULATOR": "true",
           "AZURITE_BLOB_STORAGE_URL": f"http://127.0.0.1:{port}"}
    return Emulator("azure", port, process, workdir, env)


@pytest.fixture(scope="session")
def moto():
    emulator = start_moto()
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def azurite():
    emulator = start_azurite()
    yield emulator
    emulator.stop()


def use(emulator: Emulator, monkeypatch) -> str:
    """A fresh bucket on `emulator`, its environment set for this test: the lake's URL."""
    for name, value in emulator.env.items():
        monkeypatch.setenv(name, value)
    return emulator.url(emulator.bucket())


@pytest.fixture
def lake_root(request, tmp_path, monkeypatch):
    """The lake of the test's pipeline: local, or on the store CDC_SQL_TEST_STORE names."""
    if not STORE:
        return tmp_path / "lake"
    if request.node.get_closest_marker("local_lake"):
        pytest.skip("looks at a local lake's files")
    return use(request.getfixturevalue({"s3": "moto", "azure": "azurite"}[STORE]), monkeypatch)
