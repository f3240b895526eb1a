"""The JSON Schema for pipeline YAML: generated from the config model, committed, and as strict
as `validate --offline` on keys, types, ranges, choices and names."""
from pathlib import Path

import jsonschema
import pytest
import yaml

from cdc_sql.config.json_schema import schema_text
from cdc_sql.config.model import load_pipeline
from cdc_sql.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "pipelines" / "pipeline.schema.json"
GOOD = {"name": "shop", "source": {"host": "db", "user": "cdc", "password": "${PW}"},
        "target": {"path": "./lake"}, "tables": [{"name": "orders", "source": "shop.orders"}]}


def _with(path: str, value):
    import copy

    doc = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = doc
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return doc


DELETE = object()
BAD = {
    "unknown key": _with("source.hots", "x"),
    "unknown top-level key": _with("sink", {}),
    "port not a number": _with("source.port", "many"),
    "port out of range": _with("source.port", 70000),
    "chunk_size negative": _with("source.chunk_size", -1),
    "unknown startup mode": _with("source.startup", "now"),
    "timestamp mode without its key": _with("source.startup", "timestamp"),
    "offset mode without its key": _with("source.startup", "offset"),
    "missing host": _with("source.host", DELETE),
    "empty host": _with("source.host", ""),
    "missing target path": _with("target.path", DELETE),
    "table name not an identifier": _with("tables.0.name", "my-orders"),
    "no tables": _with("tables", []),
    "tables not a list": _with("tables", {"name": "x"}),
    "unknown engine mode": _with("engine", {"mode": "flink"}),
    "bad schema name": _with("target.schema", "silver tables"),
    "primary_key not a list": _with("tables.0.primary_key", {"id": 1}),
    "history not true/false": _with("tables.0.history", "yes please"),
}


def _validator():
    import json

    return jsonschema.Draft202012Validator(json.loads(COMMITTED.read_text()))


def test_committed_schema_is_generated_from_the_model():
    assert COMMITTED.read_text() == schema_text(), "run: cdc-sql schema > pipelines/pipeline.schema.json"


def test_schema_accepts_what_validate_accepts():
    _validator().validate(GOOD)
    _validator().validate(yaml.safe_load((ROOT / "pipelines" / "shop.yaml").read_text()))


@pytest.mark.parametrize("case", sorted(BAD))
def test_schema_rejects_what_validate_rejects(case, tmp_path):
    document = BAD[case]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError):
        load_pipeline(path, environ={"PW": "x"})
    assert list(_validator().iter_errors(document)), case


def test_the_yaml_reference_page_is_generated_from_the_model():
    from cdc_sql.config.json_schema import reference_markdown

    page = ROOT / "docs" / "pipeline-yaml.md"
    assert page.read_text() == reference_markdown(), \
        "run: cdc-sql schema --markdown > docs/pipeline-yaml.md"
    for key in ("source.chunk_size", "target.parallelism", "tables[].projection",
                "source.ssl.ca"):
        assert f"`{key}`" in page.read_text()
