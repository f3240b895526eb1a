"""Object-store targets against real endpoints (tests/objstores.py): the lease that keeps one
writer per target, `validate`'s check of the bucket, and a whole run through the command line.
The pipeline tests themselves run on S3 and Azure with CDC_SQL_TEST_STORE (scripts/test.sh)."""
from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request

import pytest

from cdc_sql.cli import main
from cdc_sql.errors import CdcError, StateError
from cdc_sql.lake import objects
from cdc_sql.location import Location
from cdc_sql.lock import target_lock
from tests.objstores import use

pytestmark = pytest.mark.integration
STORES = ["moto", "azurite"]


@pytest.fixture(params=STORES)
def target(request, monkeypatch) -> str:
    """A lake URL in a fresh bucket of each store, its environment set."""
    return use(request.getfixturevalue(request.param), monkeypatch)


HOLD = textwrap.dedent("""
    import sys, time
    from cdc_sql.lock import target_lock
    with target_lock(sys.argv[1], "run"):
        print("held", flush=True)
        time.sleep(120)
""")


def hold(url: str, **env) -> subprocess.Popen:
    """Another process holding the target's lock (until killed)."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, url], stdout=subprocess.PIPE,
                               env={**os.environ, **env}, cwd=os.getcwd())
    assert process.stdout.readline().decode().strip() == "held"
    return process


def test_a_second_writer_is_refused_naming_the_holder_until_it_ends(target):
    first = hold(target)
    try:
        with pytest.raises(StateError, match=rf"another cdc-sql process is writing to "
                                             rf"{target} \(`run`, pid {first.pid} on "):
            with target_lock(target, "maintain"):
                pass
    finally:
        first.send_signal(signal.SIGTERM)  # dies without releasing: like a crash...
        first.wait(30)
    with pytest.raises(StateError, match=f"pid {first.pid}"):  # ...so its lease still holds
        with target_lock(target, "run"):
            pass


def test_a_crashed_holders_lease_expires_and_the_next_writer_takes_over(target, monkeypatch,
                                                                          caplog):
    monkeypatch.setenv("CDC_SQL_LEASE_SECONDS", "3")
    first = hold(target)
    first.kill()
    first.wait(30)
    with pytest.raises(StateError, match=f"pid {first.pid}"):  # just died: still live
        with target_lock(target, "run"):
            pass
    time.sleep(2.2)  # two renewals missed: the next writer waits out the rest, then takes it
    started = time.monotonic()
    with target_lock(target, "run"):
        waited = time.monotonic() - started
        assert f"took over the lease on {target} from `run`, pid {first.pid}" in caplog.text
    assert waited < 3
    with target_lock(target, "run"):  # released by the `with`: free at once
        pass


def test_a_writer_that_loses_its_lease_is_told_to_stop_and_fails(target, monkeypatch):
    monkeypatch.setenv("CDC_SQL_LEASE_SECONDS", "0.9")
    lost = threading.Event()
    with pytest.raises(StateError, match=r"lost its lease on .* \(another process took it over\)"):
        with target_lock(target, "run", on_lost=lost.set):
            store = objects.store(Location.of(target))
            objects.overwrite(store, "_lock", json.dumps(
                {"pid": 1, "host": "elsewhere", "command": "run", "since": "now"}).encode())
            assert lost.wait(5)


def test_validate_finds_the_bucket_writable_and_safe(target):
    line = objects.check_target(Location.of(target), os.environ)
    assert "reachable and writable" in line and "refuses a second put-if-absent" in line


def test_validate_names_a_missing_bucket_an_unreachable_endpoint_and_unsafe_settings(
        moto, monkeypatch):
    url = use(moto, monkeypatch)
    with pytest.raises(CdcError, match="is not writable: the bucket or container does not exist"):
        objects.check_target(Location.of("s3://no-such-bucket/lake"), os.environ)
    with pytest.raises(CdcError, match="AWS_S3_ALLOW_UNSAFE_RENAME is set"):
        objects.check_target(Location.of(url), {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"})
    with pytest.raises(StateError, match="AWS_S3_ALLOW_UNSAFE_RENAME is set"):
        monkeypatch.setenv("AWS_S3_ALLOW_UNSAFE_RENAME", "true")
        with target_lock(url, "run"):
            pass
    monkeypatch.delenv("AWS_S3_ALLOW_UNSAFE_RENAME")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(CdcError, match="the endpoint cannot be reached"):
        objects.check_target(Location.of(url), os.environ)


def test_a_gs_target_is_configured_from_the_environment_and_named_when_unreachable(
        tmp_path, monkeypatch):
    """No GCS emulator here takes object_store's writes (docs/engines.md, "Object storage"):
    this proves the gs:// path up to the wire, through a key file that points at loopback."""
    key = tmp_path / "gcs.json"
    key.write_text(json.dumps({"gcs_base_url": "http://127.0.0.1:9", "disable_oauth": True,
                               "client_email": "", "private_key": "", "private_key_id": ""}))
    monkeypatch.setenv("GOOGLE_SERVICE_ACCOUNT", str(key))  # nothing listens on port 9
    with pytest.raises(CdcError, match=r"target gs://lake/shop is not writable: the endpoint "
                                       r"cannot be reached \(check the gcs_base_url .*"
                                       r"http://127\.0\.0\.1:9/lake/shop"):
        objects.check_target(Location.of("gs://lake/shop"), os.environ)
    with pytest.raises(StateError, match="target gs://lake/shop cannot be locked: the endpoint "
                                         "cannot be reached"):
        with target_lock("gs://lake/shop", "run"):
            pass


class _IgnoresConditions(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint that ignores If-None-Match and If-Match (as some S3-compatible stores
    do): moto behind a proxy that drops those headers."""

    upstream = ""

    def _forward(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("if-none-match", "if-match", "host")}
        request = urllib.request.Request(self.upstream + self.path, data=body or None,
                                         method=self.command, headers=headers)
        try:
            response = urllib.request.urlopen(request, timeout=10)
        except urllib.error.HTTPError as error:
            response = error
        data = response.read()
        self.send_response(response.status if hasattr(response, "status") else response.code)
        for key, value in response.headers.items():
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    def log_message(self, *args) -> None:
        pass


def test_validate_refuses_a_store_that_ignores_put_if_absent(moto, monkeypatch):
    url = use(moto, monkeypatch)
    _IgnoresConditions.upstream = moto.env["AWS_ENDPOINT_URL"]
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _IgnoresConditions)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.server_port}")
        with pytest.raises(CdcError, match="ignores put-if-absent .* one commit would be lost"):
            objects.check_target(Location.of(url), os.environ)
    finally:
        proxy.shutdown()


def test_two_runs_on_an_s3_target_the_second_exits_1_naming_the_holder(
        mariadb, database, make_pipeline, moto, monkeypatch, capsys):
    """The README's example target (`s3://lake/shop`), as written, with the endpoint in the
    environment; `validate` checks it; a run writes its metrics beside the lake."""
    url = use(moto, monkeypatch)
    mariadb.execute("CREATE TABLE o (id INT PRIMARY KEY, amount INT)",
                    "INSERT INTO o VALUES (1, 10), (2, 20)", db=database)
    pipeline = make_pipeline(f"- name: o\n  source: {database}.o")
    text = open(pipeline.file).read()
    with open(pipeline.file, "w") as out:
        out.write(text.replace(f"path: {pipeline.root}", f"path: {url}"))
    monkeypatch.setenv("TEST_MYSQL_PASSWORD", "cdc-secret")
    assert main(["validate", pipeline.file]) == 0
    assert f"target {url}: reachable and writable" in capsys.readouterr().out
    first = subprocess.Popen([sys.executable, "-m", "cdc_sql.cli", "run", pipeline.file],
                             stderr=subprocess.PIPE)
    store = objects.store(Location.of(url))
    deadline = time.monotonic() + 120
    while objects.read(store, "_lock") is None and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert main(["run", pipeline.file, "--until-caught-up"]) == 1
        err = capsys.readouterr().err
        assert f"another cdc-sql process is writing to {url} (`run`, pid {first.pid}" in err
        assert main(["maintain", pipeline.file]) == 1
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 0, first.stderr.read().decode()[-2000:]
    assert main(["run", pipeline.file, "--until-caught-up"]) == 0  # released on exit
    assert main(["verify", pipeline.file]) == 0
    runs = [m["path"] for batch in __import__("obstore").list(store, "_metrics/") for m in batch]
    assert any(p.endswith(".json") for p in runs) and "_metrics/cdc_sql.prom" in runs


def test_many_writers_appending_to_one_table_at_once_lose_no_commit(target):
    """cdc-sql's own parallel writers (Spark tasks landing splits, bronze appends) commit to one
    table at once: every commit is a put-if-absent of the next version, so each lost race is a
    retry, never a lost commit."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa
    from deltalake import DeltaTable

    from cdc_sql.lake.delta_rs_tables import DeltaRsTables
    from cdc_sql.lake.tables import COMMIT_RETRIES, append_with_delta_rs

    path = f"{target}/bronze/t"
    schema = pa.schema([("writer", pa.int64()), ("n", pa.int64())])
    DeltaRsTables().create_arrow_table(path, schema)

    def write(writer: int) -> None:
        for n in range(3):
            append_with_delta_rs(path, iter([pa.record_batch([[writer], [n]], schema=schema)]),
                                 schema, max_commit_retries=COMMIT_RETRIES)

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(write, range(6)))
    table = DeltaTable(path)
    rows = sorted(tuple(r.values()) for r in table.to_pyarrow_table().to_pylist())
    assert rows == [(w, n) for w in range(6) for n in range(3)]
    assert table.version() == 18  # the creating commit, then one version per append
