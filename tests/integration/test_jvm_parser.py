"""Every statement the silver templates render, parsed by JVM Spark's own parser: the SQL a
Databricks or JVM Spark user runs is Spark SQL, not a Sail dialect. (JVM Delta cannot run here:
its jars need Maven. Parsing needs only the Spark jars that ship with pyspark.)"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_sql.config.model import Table
from cdc_sql.config.projection import resolve_projection
from cdc_sql.lake.silver import batch_steps, plan_silver
from cdc_sql.sql import render
from tests.integration.test_projection_functions import EXAMPLES, NAMED
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


def allowed_functions() -> list[tuple[str, str]]:
    """Every function of the projection allow-list, as the projection's Spark SQL."""
    out = []
    for name, example in {**EXAMPLES, **NAMED}.items():
        spec = Table(name="fn", source="db.fn", projection=f"SELECT id, {example} AS f FROM fn")
        projection = resolve_projection(spec, ["id", "s", "p", "n", "x", "d", "t"], ["id"])
        items = ", ".join(f"{sql} AS `{alias}`" for sql, alias in projection.columns)
        out.append((f"allowed function {name}", f"SELECT {items} FROM fn"))
    return out


def test_every_rendered_statement_and_allowed_function_parses_on_jvm_spark():
    statements = rendered_statements() + allowed_functions()
    assert len(statements) > 70
    # a classic session: none of the Spark Connect settings this process's engine has set
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_CONNECT", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE"))}
    child = subprocess.run([sys.executable, "-m", "tests.jvm_parse"], cwd=ROOT, text=True, env=env,
                           input=json.dumps([sql for _, sql in statements] + [NOT_SQL]),
                           capture_output=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    *errors, rejected = json.loads(child.stdout.strip().splitlines()[-1])
    assert rejected is not None, "JVM Spark's parser accepted garbage"
    failed = [f"{title}: {error}" for (title, _), error in zip(statements, errors) if error]
    assert not failed, "\n".join(failed)
