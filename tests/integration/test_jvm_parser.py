"""Every statement the silver templates render, parsed by JVM Spark's own parser: the SQL a
Databricks or JVM Spark user runs is Spark SQL, not a Sail dialect. (JVM Delta cannot run here:
its jars need Maven. Parsing needs only the Spark jars that ship with pyspark.)"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_sql.lake.silver import batch_steps, plan_silver
from cdc_sql.sql import render
from tests.unit.test_sql_golden import LAKE, SCENARIOS, facts

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="no Java on this machine")
ROOT = Path(__file__).resolve().parents[2]
NOT_SQL = "SELEC id FROM t"  # the parser must reject this, or the test proves nothing


def rendered_statements() -> list[tuple[str, str]]:
    out = []
    for name, (spec, sources, window) in sorted(SCENARIOS.items()):
        plan = plan_silver(spec, sources, "golden.yaml", 0)
        for n, step in enumerate(batch_steps(LAKE, plan, window, facts(name)), 1):
            for part, sql in (("", step.sql), (" unique check", step.unique_check),
                              (" as is", step.as_is)):
                if sql and sql.strip():
                    out.append((f"{name} step {n}{part}: {step.title}", sql))
    out.append(("statements", render("statements",
                                     bronze_statements="delta.`/lake/bronze/_binlog`")))
    return out


def test_every_rendered_statement_parses_on_jvm_spark():
    statements = rendered_statements()
    assert len(statements) > 20
    child = subprocess.run([sys.executable, "-m", "tests.jvm_parse"], cwd=ROOT, text=True,
                           input=json.dumps([sql for _, sql in statements] + [NOT_SQL]),
                           capture_output=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    *errors, rejected = json.loads(child.stdout.strip().splitlines()[-1])
    assert rejected is not None, "JVM Spark's parser accepted garbage"
    failed = [f"{title}: {error}" for (title, _), error in zip(statements, errors) if error]
    assert not failed, "\n".join(failed)
