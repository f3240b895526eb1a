"""Which engine a session talks to, the Delta jars a JVM Spark needs, and one clear line for
each bad setup: Java missing, jars missing, jars of another Spark line, nothing answering."""
import subprocess
import sys

import pytest

from cdc_sql import engine as engines
from cdc_sql import jars
from cdc_sql.dev.spark_cluster import _Processes
from cdc_sql.errors import CdcError


class FakeSession:
    def __init__(self, version: str, catalog: str):
        self.answer = [(version, catalog)]

    def sql(self, text):
        assert text == "SELECT version(), current_catalog()"
        return self

    def collect(self):
        return self.answer


def test_the_engine_is_what_the_session_says_it_is_never_the_mode():
    assert engines.probe(FakeSession("0.7.2", "sail")) == (engines.SailEngine, "0.7.2")
    assert engines.probe(FakeSession("4.1.4 c3a0d2b", "spark_catalog")) == \
        (engines.DeltaSparkEngine, "4.1.4")
    sail, spark = engines.SailEngine("remote", None), engines.DeltaSparkEngine("remote", None)
    assert not (sail.optimizes or sail.describes_history or sail.alters_columns)
    assert spark.optimizes and spark.describes_history and spark.alters_columns


def test_delta_for_each_spark_line():
    assert jars.delta_for("4.1.4") == ("delta-spark_4.1_2.13", "4.4.0")
    assert jars.delta_for("4.0.5") == ("delta-spark_2.13", "4.0.1")
    with pytest.raises(CdcError, match="no Delta Lake release .* Spark 3.5.2"):
        jars.delta_for("3.5.2")


def test_jars_pyspark_ships_are_pruned(tmp_path):
    spark_jars, folder = tmp_path / "spark", tmp_path / "delta"
    spark_jars.mkdir()
    folder.mkdir()
    for name in ("jackson-core-2.21.2.jar", "zstd-jni-1.5.7-6.jar"):
        (spark_jars / name).touch()
    for name in ("jackson-core-2.13.5.jar", "zstd-jni-1.5.7-3.jar",
                 "delta-spark_4.1_2.13-4.4.0.jar", "delta-storage-4.4.0.jar"):
        (folder / name).touch()
    assert jars.artifact_name("delta-spark_4.1_2.13-4.4.0.jar") == "delta-spark_4.1_2.13"
    assert jars.prune(folder, spark_jars) == ["delta-spark_4.1_2.13-4.4.0.jar",
                                              "delta-storage-4.4.0.jar"]


def test_hadoop_aws_matches_the_hadoop_pyspark_ships(tmp_path):
    for name in ("hadoop-client-runtime-3.4.1.jar", "hadoop-client-api-3.4.1.jar",
                 "parquet-hadoop-1.16.0.jar"):
        (tmp_path / name).touch()
    assert jars.hadoop_version(tmp_path) == "3.4.1"
    (tmp_path / "hadoop-client-api-3.4.1.jar").unlink()
    with pytest.raises(CdcError, match="no hadoop-client-api jar: cannot tell which hadoop-aws"):
        jars.hadoop_version(tmp_path)


def test_s3a_reads_the_environment_delta_rs_reads_and_never_copies_a_secret():
    moto = {"AWS_ENDPOINT_URL": "http://127.0.0.1:5599", "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
            "AWS_SESSION_TOKEN": "t0ken", "AWS_REGION": "eu-west-1"}
    settings = engines.s3a_settings(moto)
    assert settings == {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
        "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1",
        "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:5599",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false"}
    assert not {"AKIDEXAMPLE", "s3cr3t", "t0ken"} & set(settings.values())
    # AWS itself: s3:// still goes to S3A, virtual-hosted requests, TLS
    assert engines.s3a_settings({"AWS_DEFAULT_REGION": "us-east-2"}) == {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-2"}
    hosted = engines.s3a_settings({"AWS_ENDPOINT_URL": "https://s3.example.com",
                                   "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"})
    assert hosted["spark.hadoop.fs.s3a.path.style.access"] == "false"
    assert "spark.hadoop.fs.s3a.connection.ssl.enabled" not in hosted


def test_jars_missing_or_of_another_spark_line_say_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("CDC_SQL_SPARK_JARS", str(tmp_path))
    with pytest.raises(CdcError, match="Delta Lake jars are not installed in .*scripts/setup.sh"):
        engines.start("local")
    (tmp_path / jars.STAMP).write_text("io.delta:delta-spark_2.13:4.0.1\n")
    (tmp_path / "delta-spark_2.13-4.0.1.jar").touch()
    with pytest.raises(CdcError, match=r"\(io.delta:delta-spark_2.13:4.0.1\) are not for Spark 4.1"):
        engines.start("local")


def test_java_missing_is_one_line(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(CdcError, match="needs Java 17 or later"):
        engines.start("local")


def test_a_spark_connect_url_nothing_answers_is_one_line():
    with pytest.raises(CdcError, match=r"sc://127.0.0.1:1 does not answer \(Connection refused\)"):
        engines.start("remote", "sc://127.0.0.1:1")


def test_a_cluster_process_that_does_not_answer_is_stopped_and_named():
    processes = _Processes("unit")
    log = processes.spawn("master", [sys.executable, "-c",
                                     "import time; print('starting', flush=True); time.sleep(60)"])
    with pytest.raises(CdcError, match=r"the Spark master did not answer within 1 s \(its log: "
                                       r".*master.log; last line: starting\)"):
        processes.wait("the Spark master", lambda: False, log, timeout=1)
    assert processes.processes == []  # stopped
    subprocess.run(["rm", "-rf", str(processes.dir)], check=True)


def test_parameters_go_in_as_literals_of_their_types_outside_quoted_text():
    import datetime as dt
    import decimal

    from cdc_sql.sql import inline

    sql = "SELECT :a, ':a', `:a`, x::int, :b, :c, :d, :e, :f -- :a\nFROM t WHERE o > :a"
    assert inline(sql, {"a": "it's", "b": 3, "c": decimal.Decimal("1.50"),
                        "d": dt.datetime(2024, 1, 2, 3, 4, 5), "e": dt.date(2024, 1, 2),
                        "f": None}) == (
        "SELECT 'it\\'s', ':a', `:a`, x::int, 3, 1.50BD, TIMESTAMP_NTZ '2024-01-02 03:04:05', "
        "DATE '2024-01-02', NULL -- :a\nFROM t WHERE o > 'it\\'s'")


@pytest.mark.parametrize("mode", ["sail", "remote", "active"])
def test_engine_conf_is_for_the_jvm_cdc_sql_starts(mode):
    with pytest.raises(CdcError, match=f"engine.conf sets the JVM Spark cdc-sql starts itself "
                                       f".*a `{mode}` engine takes its settings"):
        engines.start(mode, "sc://127.0.0.1:1", {"spark.sql.catalogImplementation": "hive"})


def test_a_catalog_on_sail_is_refused_before_anything_is_written():
    from types import SimpleNamespace

    from cdc_sql.run.runner import refuse_catalog

    pipeline = SimpleNamespace(file="p.yaml", target=SimpleNamespace(catalog="main"))
    with pytest.raises(CdcError, match="p.yaml: target.catalog `main`: the sail engine has no "
                                       "catalog that outlives its session"):
        refuse_catalog(pipeline, engines.SailEngine("sail", None))
    refuse_catalog(pipeline, engines.DeltaSparkEngine("local", None))
    refuse_catalog(SimpleNamespace(file="p.yaml", target=SimpleNamespace(catalog="")),
                   engines.SailEngine("sail", None))


def test_an_engine_that_starts_on_first_use_imports_no_pyspark_before():
    """A run of plain tables seldom starts the engine: making it costs no pyspark import (a
    tenth of a second of every run); without pyspark it still says so at once."""
    import sys

    code = ("import sys\nfrom cdc_sql import engine\nengine.start('sail')\n"
            "assert 'pyspark' not in sys.modules, 'pyspark imported'\n"
            "sys.modules['pyspark'] = None\n"
            "try:\n    engine.start('sail')\nexcept engine.CdcError as exc:\n"
            "    assert 'needs pyspark' in str(exc)\nelse:\n    raise SystemExit('no error')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
