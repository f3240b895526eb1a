"""The wheel users install, where their Spark already is: `scripts/setup.sh spark-4.0` builds
it from this tree and installs it (`cdc-sql[spark]`) into a clean venv beside pyspark 4.0;
from there it validates a pipeline and runs it to silver on the tests' engine. scripts/test.sh
runs it with that venv's Python and CDC_SQL_TEST_WHEEL_VENV naming the venv."""
import os
import subprocess
from pathlib import Path

import pytest
from deltalake import DeltaTable

from cdc_sql.dev.mariadb import PASSWORD
from tests.integration.helpers import silver_path

VENV = os.path.abspath(os.environ["CDC_SQL_TEST_WHEEL_VENV"]) \
    if os.environ.get("CDC_SQL_TEST_WHEEL_VENV") else ""  # its commands run from elsewhere
pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not VENV, reason="CDC_SQL_TEST_WHEEL_VENV (scripts/test.sh)")]


def sh(*argv, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], check=True, capture_output=True, text=True,
                          **kwargs)


def test_the_wheel_validates_and_runs_a_pipeline_in_a_clean_venv(mariadb, database, tmp_path,
                                                                 make_pipeline):
    installed = sh(Path(VENV) / "bin/python", "-c", "import cdc_sql; print(cdc_sql.__file__)",
                   cwd=tmp_path).stdout
    assert installed.startswith(str(Path(VENV).resolve())) or "site-packages" in installed
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
                    "INSERT INTO t VALUES (1, 'a'), (2, 'b')", db=database)
    pipeline = make_pipeline(f"- name: t\n  source: {database}.t\n"
                             f"- name: p\n  source: {database}.t\n"
                             f"  projection: SELECT id, upper(v) AS v FROM t")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
           "TEST_MYSQL_PASSWORD": PASSWORD}
    cdc_sql = Path(VENV) / "bin/cdc-sql"
    outside = {"cwd": tmp_path, "env": env}  # not this tree: the installed package
    assert "valid (2 tables" in sh(cdc_sql, "validate", pipeline.file, **outside).stdout
    sh(cdc_sql, "run", pipeline.file, "--until-caught-up", **outside)
    for name, expected in (("t", ["a", "b"]), ("p", ["A", "B"])):
        rows = DeltaTable(silver_path(pipeline, name)).to_pyarrow_table()
        assert sorted(rows.column("v").to_pylist()) == expected
