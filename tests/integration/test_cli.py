"""`plan`, `run` and `status` through the command line entry point."""
import json
from pathlib import Path

import pytest

from cdc_sql.cli import main

pytestmark = pytest.mark.integration


@pytest.fixture
def pipeline(mariadb, database, make_pipeline, monkeypatch):
    mariadb.execute("CREATE TABLE o (id INT PRIMARY KEY, amount INT)", db=database)
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO o VALUES (%s, %s)", [(i, i) for i in range(1, 2501)])
    monkeypatch.setenv("TEST_MYSQL_PASSWORD", "cdc-secret")
    return make_pipeline(f"- name: big\n  source: {database}.o\n"
                         f"  projection: SELECT id, amount FROM o WHERE amount > 10")


def test_plan_shows_splits_and_sql(pipeline, capsys):
    assert main(["plan", pipeline.file]) == 0
    out = capsys.readouterr().out
    assert "3 snapshot splits" in out and "split 0: [None, (1001,))" in out
    assert "MERGE INTO delta.`" in out and "LEFT ANTI JOIN keyed AS later" in out
    assert "JOIN `cdc_candidates_big` AS c" in out
    assert "COALESCE(`amount` > 10, FALSE)" in out
    assert "by delta-rs" not in out  # a projection: every batch through the engine


def test_plan_says_small_windows_of_a_plain_table_are_merged_in_process(
        pipeline, database, make_pipeline, capsys):
    plain = make_pipeline(f"- name: plain\n  source: {database}.o")
    assert main(["plan", plain.file]) == 0
    assert "fits in 512 MB" in capsys.readouterr().out


@pytest.mark.local_lake
def test_run_then_status_json_and_metrics(pipeline, mariadb, capsys):
    assert main(["run", pipeline.file, "--until-caught-up"]) == 0
    capsys.readouterr()
    assert main(["status", pipeline.file, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    (table,) = report["tables"]
    assert table["name"] == "big" and table["phase"] == "binlog"
    assert table["splits_done"] == table["splits_total"] == 3
    assert table["applied_offset"] and report["last_run"]["outcome"] == "ok"
    assert table["lag_bytes"] == 0 and table["lag_seconds"] == 0 and table["snapshot_rows"] == 2500
    assert main(["status", pipeline.file]) == 0
    assert "big" in capsys.readouterr().out
    # the metrics of that run: JSON and Prometheus text, no secret anywhere
    metrics = Path(pipeline.root) / "_metrics"
    (run_file,) = metrics.glob("run-*.json")
    document = json.loads(run_file.read_text())
    assert document["outcome"] == "ok" and document["tables"][0]["lag_bytes"] == 0
    assert [b["phase"] for b in document["batches"]].count("merge") == 1
    prom = (metrics / "cdc_sql.prom").read_text()
    assert 'cdc_sql_lag_bytes{pipeline="test",table="big"} 0' in prom
    assert "cdc-secret" not in run_file.read_text() + prom
    # the source moves on, silver does not (no run): lag shows in bytes and seconds
    database = pipeline.tables[0].source.split(".")[0]
    mariadb.execute("UPDATE o SET amount = amount + 1 WHERE id <= 100", db=database)
    assert main(["status", pipeline.file, "--json"]) == 0
    table = json.loads(capsys.readouterr().out)["tables"][0]
    assert table["lag_bytes"] > 0 and table["lag_seconds"] >= 0
    # the next run's metrics count its capture batches' rows (capture hands them to the run)
    assert main(["run", pipeline.file, "--until-caught-up"]) == 0
    (latest,) = set(metrics.glob("run-*.json")) - {run_file}
    batches = json.loads(latest.read_text())["batches"]
    assert sum(b["rows"] for b in batches if b["phase"] == "capture") == 100


def test_a_second_engine_leaves_the_first_one_working(engine):
    from cdc_sql import engine as engines

    other = engines.start("sail")
    assert other.spark is not engine.spark
    other.stop()
    assert engine.spark.range(3).count() == 3


def test_verify_finds_a_change_the_binlog_never_carried(pipeline, mariadb, capsys):
    assert main(["run", pipeline.file, "--until-caught-up"]) == 0
    assert main(["verify", pipeline.file]) == 0
    assert "big: equal to the source" in capsys.readouterr().out
    database = pipeline.tables[0].source.split(".")[0]
    with mariadb.connect(database) as conn, conn.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")  # no binlog event carries this change
        cur.execute("UPDATE o SET amount = 999999 WHERE id = 42")
    assert main(["verify", pipeline.file, "--tables", "big"]) == 1
    out = capsys.readouterr().out
    assert "1 different (key id: 42)" in out
    assert main(["verify", pipeline.file, "--tables", "nope"]) == 1


def test_json_logs_carry_no_secret(pipeline):
    import os
    import subprocess
    import sys

    env = {**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret"}
    done = subprocess.run([sys.executable, "-m", "cdc_sql.cli", "-v", "--log-format", "json", "run",
                           pipeline.file, "--until-caught-up"], env=env, capture_output=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    ours = [json.loads(line) for line in done.stderr.decode().splitlines() if line.startswith("{")]
    assert any(e["message"].startswith("run ") and ": ok in " in e["message"] for e in ours)
    assert {"time", "level", "logger", "message"} <= set(ours[0])
    assert "cdc-secret" not in done.stderr.decode() + done.stdout.decode()


@pytest.mark.local_lake  # on object stores: test_object_stores.py
def test_a_second_writer_on_one_target_is_refused(pipeline, capsys):
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "TEST_MYSQL_PASSWORD": "cdc-secret"}
    first = subprocess.Popen([sys.executable, "-m", "cdc_sql.cli", "run", pipeline.file],
                             env=env, stderr=subprocess.PIPE)
    lock = Path(pipeline.root) / "_lock"
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert main(["run", pipeline.file, "--until-caught-up"]) == 1
        err = capsys.readouterr().err
        assert "another cdc-sql process is writing to" in err and f"pid {first.pid}" in err
        assert main(["maintain", pipeline.file]) == 1
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 0, first.stderr.read().decode()[-2000:]
    assert main(["run", pipeline.file, "--until-caught-up"]) == 0  # released on exit


def test_a_clean_run_prints_only_its_own_lines(pipeline):
    """No library noise on stderr: Sail's `aborting N task(s) for SessionManagerActor` at
    exit, sqlglot's warnings, tracebacks. Only cdc-sql's own log lines."""
    import os
    import re
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "RUST_LOG"}
    env["TEST_MYSQL_PASSWORD"] = "cdc-secret"
    for command in (["run", pipeline.file, "--until-caught-up"], ["verify", pipeline.file]):
        done = subprocess.run([sys.executable, "-m", "cdc_sql.cli", *command], env=env,
                              capture_output=True, timeout=300, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        ours = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING) ")
        assert [line for line in done.stderr.splitlines() if not ours.match(line)] == [], \
            done.stderr


@pytest.mark.local_lake  # an object store's lake is reached through the engine
def test_a_run_of_a_plain_table_never_imports_pandas(mariadb, database, make_pipeline,
                                                      monkeypatch):
    """pyarrow would import pandas at the first array a run builds (0.13-0.2 s of every
    process); nothing in a run merged in this process needs it (`pandas_probe`)."""
    import subprocess
    import sys

    from tests.engines import sql_only

    if sql_only():
        pytest.skip("every window goes through the engine, whose client imports pandas")

    mariadb.execute("CREATE TABLE p (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO p VALUES (1, 'a'), (2, 'b')", db=database)
    monkeypatch.setenv("TEST_MYSQL_PASSWORD", "cdc-secret")
    file = make_pipeline(f"- name: p\n  source: {database}.p\n").file
    script = ("import atexit, sys\n"
              "atexit.register(lambda: print('pandas' in sys.modules))\n"
              "from cdc_sql.cli import console\n"
              f"sys.argv = ['cdc-sql', 'run', {str(file)!r}, '--until-caught-up']\n"
              "console()\n")
    for _ in range(2):  # the first run (a snapshot), then one with nothing to do
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split()[-1] == "False", done.stdout
