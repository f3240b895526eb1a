"""The bad-input catalogue: every case is `cdc-sql run` (or `validate`) exiting 1 with one
paragraph that names what is wrong and what to do, no secret in it, and no half-written table.
"""
import contextlib
import os
import textwrap
import threading
import time
from pathlib import Path

import pytest

from cdc_sql.cli import main
from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB
from tests.integration.helpers import state_log

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def password(monkeypatch):
    monkeypatch.setenv("TEST_MYSQL_PASSWORD", PASSWORD)


@pytest.fixture
def shop(mariadb, database):
    mariadb.execute("CREATE TABLE orders (id INT PRIMARY KEY, amount INT)",
                    "INSERT INTO orders SELECT seq, seq FROM seq_1_to_500",
                    "CREATE TABLE nokey (a INT, b INT)", db=database)
    return database


def refused(capsys, *args: str) -> str:
    """Run the CLI; it must exit 1 with one paragraph (and no password) on stderr."""
    assert main(list(args)) == 1
    err = capsys.readouterr().err
    messages = [line for line in err.splitlines() if line.startswith("cdc-sql: ")]
    assert len(messages) == 1, err
    assert PASSWORD not in err
    return messages[0].removeprefix("cdc-sql: ")


def lake_files(root) -> list[str]:
    """The files of the target's tables (the lock file is no table)."""
    root = Path(root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.name != "_lock") if root.exists() else []


def run_refused(capsys, pipeline, *fragments: str) -> None:
    """A first run that must stop before writing anything at all."""
    message = refused(capsys, "run", pipeline.file, "--until-caught-up")
    for fragment in fragments:
        assert fragment in message, message
    assert lake_files(pipeline.root) == []


# -- the pipeline file --------------------------------------------------------------------------
def write(tmp_path, text: str) -> str:
    path = tmp_path / "pipeline.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


VALID = """\
    name: p
    source:
      host: 127.0.0.1
      user: cdc
      password: ${TEST_MYSQL_PASSWORD}
    target:
      path: lake
    tables:
      - name: orders
        source: shop.orders
    """


@pytest.mark.parametrize("change, fragments", [
    (("tables:", "tables: [oops"), ("pipeline.yaml:", "line", "YAML")),
    (("  host:", "  hots:"), ("unknown key `hots`", "source.hots", "the keys here are")),
    (("  user: cdc", "  user: cdc\n  port: lots"), ("source.port", "expected a whole number",
                                                    "'lots'")),
    (("${TEST_MYSQL_PASSWORD}", "${NOT_SET_ANYWHERE}"), ("NOT_SET_ANYWHERE",)),
    (("  user: cdc", "  user: cdc\n  password_file: secret.txt"),
     ("source.password_file", "not both")),
    (("${TEST_MYSQL_PASSWORD}", "hunter2-in-the-file"),
     ("source.password", "written in the pipeline file", "password_file")),
    (("    source: shop.orders", "    source: shop.orders\n    projection: SELECT id, FROM x"),
     ("tables[0].projection",)),
    (("    source: shop.orders", "    source: shop.orders\n    projection: "
      "SELECT id, '${TEST_MYSQL_PASSWORD}' AS s FROM orders"),
     ("tables[0].projection", "only the keys that configure connections and paths")),
    (("    source: shop.orders", "    source: shop.orders\n    projection: "
      "SELECT id, reflect('java.lang.Thread', 'sleep', 1000L) AS x FROM orders"),
     ("tables[0].projection", "REFLECT(", "not allowed in a projection")),
    (("    source: shop.orders", "    source: shop.orders\n    projection: "
      "SELECT id, java_method('java.lang.System', 'getenv', 'HOME') AS x FROM orders"),
     ("tables[0].projection", "JAVA_METHOD(", "not allowed in a projection")),
    (("    source: shop.orders", "    source: shop.orders\n    projection: "
      "SELECT id, LOAD_FILE('/etc/passwd') AS f FROM orders"),
     ("tables[0].projection", "LOAD_FILE(", "not allowed in a projection")),
], ids=["yaml-syntax", "unknown-key", "wrong-type", "unset-variable", "two-passwords",
        "password-in-the-file", "projection-syntax", "environment-in-a-projection",
        "reflection", "java-method", "file-access"])
def test_pipeline_file_errors(tmp_path, capsys, change, fragments):
    old, new = change
    file = write(tmp_path, VALID.replace(old, new.replace("\n", "\n    "), 1))
    for verb in ("validate", "run"):
        message = refused(capsys, verb, file)
        assert all(f in message for f in fragments), message
        assert "pipeline.yaml" in message and "hunter2" not in message
    assert lake_files(tmp_path / "lake") == []


# -- the source ---------------------------------------------------------------------------------
def test_missing_table(shop, make_pipeline, capsys):
    pipeline = make_pipeline(f"- name: o\n  source: {shop}.nope")
    run_refused(capsys, pipeline, "tables[0]", f"{shop}.nope", "no source table matches")


def test_table_without_key(shop, make_pipeline, capsys):
    pipeline = make_pipeline(f"- name: o\n  source: {shop}.nokey")
    run_refused(capsys, pipeline, f"{shop}.nokey has no primary key", "primary_key:")


def test_projection_with_an_unknown_column(shop, make_pipeline, capsys):
    pipeline = make_pipeline(f"- name: o\n  source: {shop}.orders\n"
                             f"  projection: SELECT id, amout FROM orders")
    run_refused(capsys, pipeline, "tables[0].projection", "`amout` does not exist",
                f"{shop}.orders")


def test_projection_dropping_the_key(shop, make_pipeline, capsys):
    pipeline = make_pipeline(f"- name: o\n  source: {shop}.orders\n"
                             f"  projection: SELECT amount FROM orders")
    run_refused(capsys, pipeline, "drops the primary-key column `id`")


def test_bad_credentials(shop, make_pipeline, capsys, monkeypatch):
    pipeline = make_pipeline(f"- name: o\n  source: {shop}.orders")
    monkeypatch.setenv("TEST_MYSQL_PASSWORD", "wrong-pw-123")
    run_refused(capsys, pipeline, "access denied for cdc@127.0.0.1", "source.password")
    assert "wrong-pw-123" not in capsys.readouterr().err


def test_a_value_from_the_environment_is_never_repeated(shop, mariadb, tmp_path, capsys,
                                                        monkeypatch):
    """`user: ${AWS_SECRET_ACCESS_KEY}`: the server's `Access denied for user '...'` and our
    own message show the variable, never its value."""
    monkeypatch.setenv("CDC_TEST_SECRET_USER", "AKIA-not-a-user-0123456789")
    file = write(tmp_path, VALID.replace("  user: cdc", f"  user: ${{CDC_TEST_SECRET_USER}}\n"
                                                       f"      port: {mariadb.port}"))
    message = refused(capsys, "run", file, "--until-caught-up")
    assert f"access denied for ${{CDC_TEST_SECRET_USER}}@127.0.0.1:{mariadb.port}" in message
    assert "AKIA" not in message + capsys.readouterr().err
    assert lake_files(tmp_path / "lake") == []


def test_unreachable_host(make_pipeline, capsys):
    pipeline = make_pipeline("- name: o\n  source: a.b", port=1)
    run_refused(capsys, pipeline, "cannot connect to cdc@127.0.0.1:1", "source.host/source.port")


def test_binlog_off(tmp_path, capsys):
    with MariaDB(extra_flags=["--skip-log-bin"]) as server:
        server.execute("CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY)")
        file = write(tmp_path, VALID.replace("  user: cdc", f"  user: cdc\n      port: "
                                             f"{server.port}"))
        message = refused(capsys, "run", file)
    assert "log_bin=OFF (needs ON)" in message and "--log-bin" in message
    assert lake_files(tmp_path / "lake") == []


def test_wrong_binlog_format(shop, make_pipeline, mariadb, capsys):
    pipeline = make_pipeline(f"- name: o\n  source: {shop}.orders")
    mariadb.execute("SET GLOBAL binlog_format = 'STATEMENT'")
    try:
        run_refused(capsys, pipeline, "binlog_format=STATEMENT (needs ROW)",
                    "--binlog-format=ROW")
    finally:
        mariadb.execute("SET GLOBAL binlog_format = 'ROW'")


def test_missing_grants(shop, make_pipeline, mariadb, capsys, tmp_path):
    mariadb.execute("CREATE USER IF NOT EXISTS reader@'%' IDENTIFIED BY 'pw-reader'",
                    "GRANT SELECT ON *.* TO reader@'%'")
    (tmp_path / "reader-password").write_text("pw-reader")
    (tmp_path / "reader-password").chmod(0o600)
    pipeline = make_pipeline(f"- name: o\n  source: {shop}.orders", user="reader",
                             password="''", password_file=tmp_path / "reader-password")
    run_refused(capsys, pipeline, "needs BINLOG MONITOR",
                "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.*")
    mariadb.execute("GRANT BINLOG MONITOR ON *.* TO reader@'%'")
    run_refused(capsys, pipeline, "lacks REPLICATION SLAVE",
                "GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.*")
    mariadb.execute("GRANT REPLICATION SLAVE ON *.* TO reader@'%'")
    assert main(["validate", pipeline.file]) == 0


def test_server_id_in_use(shop, make_pipeline, mariadb, capsys):
    from pymysqlreplication import BinLogStreamReader

    other = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": mariadb.port, "user": USER,
                             "passwd": PASSWORD},
        server_id=4242, blocking=True, report_slave="someone-else", resume_stream=True,
        log_file=mariadb.query("SHOW MASTER STATUS")[0][0], log_pos=4)

    def listen() -> None:
        with contextlib.suppress(Exception):  # closed under it at the end of the test
            next(iter(other), None)

    threading.Thread(target=listen, daemon=True).start()
    deadline = time.monotonic() + 10
    while not any(row[0] == 4242 for row in mariadb.query("SHOW SLAVE HOSTS")):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pipeline = make_pipeline(f"- name: o\n  source: {shop}.orders", server_id=4242)
    try:
        run_refused(capsys, pipeline, "server_id 4242 is already used by a replica of the "
                    "source (host someone-else)", "its own server_id")
    finally:
        other.close()


# -- the target ---------------------------------------------------------------------------------
def test_target_not_writable(shop, make_pipeline, tmp_path, capsys):
    (tmp_path / "a-file").write_text("not a directory")
    pipeline = make_pipeline(f"- name: o\n  source: {shop}.orders")
    Path(pipeline.file).write_text(Path(pipeline.file).read_text().replace(
        str(pipeline.root), str(tmp_path / "a-file" / "lake")))
    message = refused(capsys, "run", pipeline.file)
    assert f"target.path {tmp_path / 'a-file' / 'lake'} is not writable" in message


def _tables(root) -> list[str]:
    return [f for f in lake_files(root) if not f.startswith(("_state", "_metrics"))]


def test_two_pipelines_on_one_target(shop, make_pipeline, engine, capsys):
    pipeline = make_pipeline(f"- name: o\n  source: {shop}.orders")
    assert main(["run", pipeline.file, "--until-caught-up"]) == 0
    before, entries = _tables(pipeline.root), len(state_log(pipeline.root))
    other = Path(pipeline.file).with_name("other.yaml")
    other.write_text(Path(pipeline.file).read_text().replace("name: test", "name: other", 1))
    for verb in ("run", "maintain"):
        message = refused(capsys, verb, str(other))
        assert f"belongs to pipeline `test` (from {pipeline.file})" in message
        assert "this is pipeline `other`" in message and "own target.path" in message
    assert _tables(pipeline.root) == before and len(state_log(pipeline.root)) == entries
    assert main(["run", pipeline.file, "--until-caught-up"]) == 0


def test_purged_binlog(tmp_path, capsys):
    with MariaDB() as server:
        server.execute("CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY)",
                       "INSERT INTO shop.orders VALUES (1)")
        file = write(tmp_path, VALID.replace("  user: cdc", f"  user: cdc\n      port: "
                                             f"{server.port}"))
        assert main(["run", file, "--until-caught-up"]) == 0
        server.execute("INSERT INTO shop.orders VALUES (2)")
        server.purge_binlogs()
        before = _tables(tmp_path / "lake")
        capsys.readouterr()
        message = refused(capsys, "run", file, "--until-caught-up")
    assert "purged the binlog capture needs (binlog.000001:" in message and \
        "on_purged_binlog: resnapshot" in message
    assert _tables(tmp_path / "lake") == before


def test_silver_changed_by_hand(shop, make_pipeline, engine, capsys):
    from deltalake import DeltaTable

    pipeline = make_pipeline(f"- name: o\n  source: {shop}.orders")
    assert main(["run", pipeline.file, "--until-caught-up"]) == 0
    path = f"{pipeline.root}/silver/o"
    ours = DeltaTable(path).version()
    engine.spark.sql(f"DELETE FROM delta.`{path}` WHERE id = 5").collect()
    message = refused(capsys, "run", pipeline.file, "--until-caught-up")
    assert "silver table o" in message and f"TO VERSION AS OF {ours}" in message
    assert DeltaTable(path).version() == ours + 1  # nothing merged over the change


def test_a_change_that_cannot_be_decoded_stops_every_table_with_its_place(
        shop, make_pipeline, mariadb, capsys):
    """A writer session logging partial row images (binlog_row_image=MINIMAL, allowed per
    session): the run stops naming the table, the binlog place and what to do; no table moves
    past the change (the other table's later change waits too), and without that table the
    pipeline goes on."""
    mariadb.execute("CREATE TABLE other (id INT PRIMARY KEY, v INT)",
                    "INSERT INTO other VALUES (1, 1)", db=shop)
    both = (f"- name: o\n  source: {shop}.orders\n- name: other\n  source: {shop}.other")
    pipeline = make_pipeline(both)
    assert main(["run", pipeline.file, "--until-caught-up"]) == 0
    with mariadb.connect(shop) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION binlog_row_image = 'MINIMAL'")
        cur.execute("UPDATE orders SET amount = 0 WHERE id = 7")
        conn.commit()
    mariadb.execute("UPDATE other SET v = 2", db=shop)
    before = _tables(pipeline.root)
    message = refused(capsys, "run", pipeline.file, "--until-caught-up")
    assert f"cannot decode a row of {shop}.orders at binlog binlog." in message, message
    assert "binlog_row_image=FULL" in message and "remove the table" in message, message
    assert _tables(pipeline.root) == before
    pipeline = make_pipeline(f"- name: other\n  source: {shop}.other")
    assert main(["run", pipeline.file, "--until-caught-up"]) == 0
    from deltalake import DeltaTable

    silver = DeltaTable(f"{pipeline.root}/silver/other").to_pyarrow_table(columns=["id", "v"])
    assert silver.to_pylist() == [{"id": 1, "v": 2}]


def _fill_up_after(monkeypatch, writes: int, failures: int = 10**9) -> None:
    """Writing Parquet files under the target fails with ENOSPC after `writes` batches, for
    `failures` batches, as a full disk makes pyarrow fail (bronze and silver's first files)."""
    import errno
    import itertools

    from cdc_sql.lake import parquet_files

    original, calls = parquet_files.Files.write, itertools.count()

    def write(self, batch):
        if writes <= next(calls) < writes + failures:
            raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No "
                                        "space left on device")
        return original(self, batch)

    monkeypatch.setattr(parquet_files.Files, "write", write)


def test_a_full_target_mid_snapshot_is_one_line_and_the_run_repeats(
        shop, make_pipeline, mariadb, engine, capsys, monkeypatch):
    from cdc_sql.lake.parquet_files import Files
    from tests.integration.helpers import assert_silver_equals

    pipeline = make_pipeline(f"- name: o\n  source: {shop}.orders", chunk_size=100,
                             parallelism=1)
    space = Files.write
    _fill_up_after(monkeypatch, writes=1)
    for _ in range(2):  # and again: the same line
        message = refused(capsys, "run", pipeline.file, "--until-caught-up")
        assert message == (f"the target {pipeline.root} is out of space (No space left on "
                           f"device): nothing committed is lost; free space, then run again (a "
                           f"run following the binlog retries by itself)")
    monkeypatch.setattr(Files, "write", space)  # space again
    code, err = main(["run", pipeline.file, "--until-caught-up"]), capsys.readouterr().err
    assert code == 0, err
    assert "Traceback" not in err and "unexpected" not in err
    assert_silver_equals(engine, pipeline, "o", mariadb, f"SELECT * FROM {shop}.orders")


def test_follow_mode_waits_for_space(shop, make_pipeline, engine, caplog, monkeypatch):
    from cdc_sql.run.runner import run_pipeline

    pipeline = make_pipeline(f"- name: o\n  source: {shop}.orders", chunk_size=100,
                             parallelism=1)
    _fill_up_after(monkeypatch, writes=1, failures=2)  # two runs fail, the third has space
    stop = threading.Event()

    def stop_once_silver_exists() -> None:
        deadline = time.monotonic() + 120
        while not os.path.exists(pipeline.root / "silver" / "o" / "_delta_log") and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        stop.set()

    threading.Thread(target=stop_once_silver_exists, daemon=True).start()
    entry = run_pipeline(pipeline, engine, stop, until_caught_up=False, give_up_after=120)
    assert entry.outcome == "stopped"
    retries = [r.getMessage() for r in caplog.records if "running again in" in r.getMessage()]
    assert len(retries) == 2 and "is out of space" in retries[0], retries
