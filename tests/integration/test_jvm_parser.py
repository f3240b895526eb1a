"""cdc-sql's SQL on JVM Spark's own parser and analyser: the SQL a Databricks or JVM Spark user
runs is Spark SQL, not a Sail dialect. Every golden scenario's steps and every allowed
function, more shapes than the pipelines run on Spark + Delta (CDC_SQL_TEST_ENGINE=local) reach:
the Spark jars that ship with pyspark parse every statement, and analyse every step that reads
no Delta-only feature against empty Parquet tables of the same schemas (tests/jvm_parse.py),
without Delta's jars, so that this runs in the default suite."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import from_arrow_schema

from cdc_sql.config.model import History, Table
from cdc_sql.config.projection import resolve_projection
from cdc_sql.lake import bronze
from cdc_sql.lake.silver.plan import plan_silver
from cdc_sql.lake.silver.steps import batch_steps
from cdc_sql.source.rows import META_COLUMNS
from tests.integration.test_projection_functions import EXAMPLES, NAMED
from tests.unit.test_sql_golden import LAKE, SCENARIOS, facts

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="no Java on this machine")
ROOT = Path(__file__).resolve().parents[2]
NOT_SQL = "SELEC id FROM t"  # the parser must reject this, or the test proves nothing


def steps_of(name: str):
    spec, sources, window = SCENARIOS[name]
    plan = plan_silver(spec, sources, "golden.yaml", 0)
    return spec, sources, batch_steps(LAKE, plan, window, facts(name))


def rendered_statements() -> list[tuple[str, str]]:
    out = []
    for name in sorted(SCENARIOS):
        for n, step in enumerate(steps_of(name)[2], 1):
            for part, sql in (("", step.sql), (" unique check", step.unique_check),
                              (" as is", step.as_is)):
                if sql and sql.strip():
                    out.append((f"{name} step {n}{part}: {step.title}", sql))
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


def _spark_json(schema: pa.Schema) -> str:
    return from_arrow_schema(schema, prefer_timestamp_ntz=True).json()


def program(name: str) -> list[dict]:
    """A batch's steps as the runner carries them out, with stand-ins for the Delta tables."""
    spec, sources, steps = steps_of(name)
    ops = []
    bronze_columns = facts(name).changes_columns
    for source in sources:
        typed = bronze_columns.get(source.qualified)
        changes = pa.schema([*typed.items(), *META_COLUMNS]) if typed else \
            bronze.changes_schema(source)
        ops += [{"standin": LAKE.changes_path(source.db, source.name),
                 "schema": _spark_json(changes)},
                {"standin": LAKE.snapshot_path(source.db, source.name),
                 "schema": _spark_json(bronze.snapshot_schema(source))}]
    made = False  # silver's and history's stand-ins

    def targets_like(view: str) -> list[dict]:
        """Silver and history with the columns of a view of changes (or of candidates)."""
        ops = [{"standin": LAKE.silver_path(spec.name), "like": view, "drop": ["_cdc_remove"]}]
        if spec.history:  # with chosen columns, history holds the change its values are from
            ops.append({"standin": LAKE.history_path(spec.name), "like": view,
                        "drop": ["_cdc_remove"], "history": True,
                        "held": isinstance(spec.history, History)})
        return ops

    for n, step in enumerate(steps, 1):
        title = f"{name} step {n}: {step.title}"
        if not made and LAKE.silver_path(spec.name) in step.sql and \
                step.name.startswith("cdc_range_removes_"):  # reads silver before the MERGE
            ops += targets_like(f"cdc_candidates_{spec.name}")
            made = True
        if step.kind == "splits":
            ops.append({"splits": step.name, "rows": [list(r.row) for r in step.splits]})
        elif step.kind == "view":
            ops.append({"view": step.name, "sql": step.sql, "args": step.args, "title": title})
        elif step.kind == "append":  # the snapshot rows silver is created with
            ops.append({"check": step.sql, "args": step.args, "title": title})
        elif step.kind == "stage":
            for part, sql in (("unique check", step.unique_check), ("as is", step.as_is)):
                if sql:
                    ops.append({"check": sql, "title": f"{title} ({part})"})
            ops.append({"view": step.view, "sql": step.sql, "args": step.args, "title": title})
            if step.view.startswith("cdc_changes_") and not made:  # silver and history
                ops += targets_like(step.view)                       # get these columns
                made = True
    return ops


def test_cdc_sql_parses_and_analyses_on_jvm_spark():
    statements = rendered_statements() + allowed_functions()
    assert len(statements) > 70
    programs = {name: program(name) for name in sorted(SCENARIOS)}
    job = {"parse": [sql for _, sql in statements] + [NOT_SQL],
           "programs": list(programs.values())}
    # a classic session: none of the Spark Connect settings this process's engine has set
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_CONNECT", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE"))}
    child = subprocess.run([sys.executable, "-m", "tests.jvm_parse"], cwd=ROOT, text=True,
                           env=env, input=json.dumps(job), capture_output=True, timeout=300)
    assert child.returncode == 0, child.stderr[-2000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    *errors, rejected = result["parse"]
    assert rejected is not None, "JVM Spark's parser accepted garbage"
    failed = [f"{title}: {error}" for (title, _), error in zip(statements, errors) if error]
    assert not failed, "\n".join(failed)
    analysed = [(title, error) for steps in result["programs"] for title, error in steps]
    wrong = [f"{title}: {error}" for title, error in analysed
             if error and not error.startswith("skipped")]
    assert not wrong, "\n".join(wrong)
    done = [title for title, error in analysed if error is None]
    for name in SCENARIOS:  # every step but the MERGEs (Delta) is analysed
        assert any(t.startswith(name) and "cdc_changes_" in t for t in done), name
        assert any(t.startswith(name) and "cdc_candidates_" in t for t in done), name
    assert any("cdc_versions_" in t for t in done)
    assert any("written into silver" in t for t in done)
    assert not [t for t, e in analysed if e and e.startswith("skipped")], analysed
