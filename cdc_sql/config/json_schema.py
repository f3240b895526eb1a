"""A JSON Schema for pipeline YAML, generated from the config model (model.py), so editors
autocomplete and check pipeline files with the same rules `validate --offline` applies to keys,
types, ranges and choices. SQL and regular expressions are checked by `validate` only.

`cdc-sql schema` prints it; pipelines/pipeline.schema.json is the committed copy (a test keeps it
in sync).
"""
from __future__ import annotations

import json
import types
import typing
from dataclasses import MISSING, fields
from typing import Any

from sqlglot import exp

import udfs
from cdc_sql.config.loader import INTERPOLATED
from cdc_sql.config.model import Pipeline, yaml_key
from cdc_sql.config.projection import ALLOWED_FUNCTIONS, ALLOWED_NAMES

SCHEMA_ID = "https://cdc-sql.dev/pipeline.schema.json"
# ${VAR} or ${VAR:-default}: the keys in loader.INTERPOLATED may take their value from the
# environment; no other key may hold `${`.
_INTERPOLATED = {"type": "string", "pattern": r"^.*\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}.*$"}
_NO_ENVIRONMENT = {"not": {"pattern": r"\$\{"}}


def json_schema() -> dict:
    schema = _object(Pipeline, "")
    schema["allOf"] = [_needs("timestamp", "startup_timestamp"), _needs("offset", "startup_offset")]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": "cdc-sql pipeline", **schema}


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


def _object(cls: type, path: str) -> dict:
    hints = typing.get_type_hints(cls)
    properties, required = {}, []
    for spec in fields(cls):
        if spec.metadata.get("internal"):
            continue
        is_required = spec.default is MISSING and spec.default_factory is MISSING
        name = yaml_key(spec)
        child = f"{path}.{name}" if path else name
        properties[name] = _property(hints[spec.name], spec.metadata, child, is_required)
        if is_required:
            required.append(name)
        elif spec.default is not MISSING and isinstance(spec.default, (str, int, float, bool)):
            properties[name]["default"] = spec.default
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _property(hint: Any, rules: dict, path: str, required: bool = False) -> dict:
    doc = {"description": rules["doc"]} if "doc" in rules else {}
    not_empty = {"minItems": 1} if required else {}
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        items = {"choices": rules["item_choices"]} if "item_choices" in rules else {}
        return {**doc, "type": "array", "items": _property(item, items, f"{path}[]"),
                **not_empty}
    if hasattr(hint, "__dataclass_fields__"):
        return {**_object(hint, path), **doc}
    if typing.get_origin(hint) is dict:  # names to text (table properties, engine.conf)
        names = ({"propertyNames": {"pattern": f"^{rules['key_pattern'].pattern}$"}}
                 if "key_pattern" in rules else {})
        return {**doc, "type": "object", **names,
                "additionalProperties": {"type": ["string", "number", "boolean"],
                                         **_NO_ENVIRONMENT}}
    if isinstance(hint, types.UnionType):  # true/false, or a mapping of finer choices
        return {**doc, "anyOf": [_property(arg, {}, path) for arg in typing.get_args(hint)]}
    if hint is str:
        out: dict = {"type": "string"}
        if "choices" in rules:
            out["enum"] = list(rules["choices"])
        if "pattern" in rules:
            out["pattern"] = f"^{rules['pattern'].pattern}$"
        if not rules.get("choices") and not rules.get("pattern"):
            # numbers are read as text, like the loader does; a required key must not be empty
            out["type"] = ["string", "number"] if required else ["string", "number", "null"]
        if required:
            out["minLength"] = 1
        if path not in INTERPOLATED and "choices" not in rules:
            out.update(_NO_ENVIRONMENT)
        return {**doc, **out}
    if hint is bool:
        return {**doc, "type": "boolean"}
    number: dict = {"type": "integer" if hint is int else "number"}
    for rule in ("minimum", "maximum"):
        if rule in rules:
            number[rule] = rules[rule]
    if path not in INTERPOLATED:
        return {**doc, **number}
    return {**doc, "anyOf": [number, _INTERPOLATED]}


def _needs(mode: str, key: str) -> dict:
    """startup: <mode> needs <key>."""
    return {"if": {"properties": {"source": {"properties": {"startup": {"const": mode}},
                                             "required": ["startup"]}}},
            "then": {"properties": {"source": {"required": [key]}}}}


# -- the YAML reference (docs/pipeline-yaml.md), from the same schema --------------------------
REFERENCE_INTRO = """# Pipeline YAML reference

Generated from the config model (`cdc-sql schema --markdown`); a test keeps this page in sync.
Unknown keys are errors (with the nearest known key suggested). `${VAR}` and `${VAR:-default}`
take a value from the environment, in the keys marked *env* only: a pipeline file cannot copy
other environment variables (the job's secrets) into a projection or a table name; `password`
is exactly one `${VAR}` (no default), and operators can list the variables a pipeline may read
(`CDC_SQL_PIPELINE_VARIABLES`, docs/security.md). A pipeline file is plain YAML data: no
aliases, no tags beyond `!!str`/`!!int`/`!!float`/`!!bool`/`!!null`. Relative
paths are relative to the YAML file. `pipelines/` has examples; `pipelines/pipeline.schema.json`
gives editors completion and checks (`# yaml-language-server: $schema=pipeline.schema.json`).
"""


def reference_markdown() -> str:
    """Every key of a pipeline file: type, default, rules, what it does."""
    schema = json_schema()
    lines = [REFERENCE_INTRO]
    lines += _section("top level", schema, "")
    lines += _projections()
    return "\n".join(lines).rstrip() + "\n"


def _projections() -> list[str]:
    """The projection rules and the functions a projection may call (projection.py)."""
    lines = ["## Projections", "",
             "`tables[].projection` is one `SELECT ... FROM <table> [WHERE ...]` in MySQL or Spark",
             "SQL, checked by sqlglot and transpiled to Spark SQL: no joins, subqueries, aggregates,",
             "windows or ordering; every key column kept; expressions named with `AS`. Its `WHERE`",
             "is membership: a row that stops matching leaves silver, one that starts matching",
             "enters it. It may call these functions (each runs on MariaDB and on the engine in",
             "the tests with the same results), `CRC32`, and the functions registered in `udfs/`:",
             ""]
    spelled = {"StrPosition": ("LOCATE", "INSTR"), "Pad": ("LPAD", "RPAD"), "And": (),
               "Or": (), "TsOrDsToDate": ("DATE",), "Case": ("CASE",)}
    for group, names in ALLOWED_FUNCTIONS.items():
        shown = sorted({sql for name in names
                        for sql in spelled.get(name, getattr(exp, name).sql_names()[:2])})
        lines.append(f"- {group}: {', '.join(f'`{n}`' for n in shown)}")
    lines.append(f"- by name: {', '.join(f'`{n}`' for n in ALLOWED_NAMES)}; "
                 f"from `udfs/`: {', '.join(f'`{n}`' for n in sorted(udfs.UDFS)) or 'none'}")
    lines += ["", "Anything else (files, the session, the clock, the JVM: `LOAD_FILE`, `USER`,",
              "`NOW`, `reflect`, `java_method`...) is refused, naming the call."]
    return lines


def _section(title: str, node: dict, path: str) -> list[str]:
    lines = [f"## {title}", "", "| key | type | default | what it does |", "|---|---|---|---|"]
    nested = []
    required = set(node.get("required", []))
    for name, prop in node["properties"].items():
        key = f"{path}.{name}" if path else name
        items = prop.get("items", {})
        if "properties" in prop or "properties" in items:
            nested.append((key + ("[]" if items else ""), items or prop))
        nested += [(key, choice) for choice in prop.get("anyOf", [])
                   if choice.get("type") == "object"]
        default = "required" if name in required else (
            f"`{json.dumps(prop['default'])}`" if "default" in prop else "")
        lines.append(f"| `{key}` | {_type_text(prop, key)} | {default} | "
                     f"{prop.get('description', '').replace('|', '&#124;')} |")
    lines.append("")
    for key, child in nested:
        lines += _section(f"`{key}`", child, key)
    return lines


def _type_text(prop: dict, path: str) -> str:
    if "enum" in prop:
        return " \\| ".join(f"`{v}`" for v in prop["enum"])
    kind = prop.get("type") or next((p.get("type") for p in prop.get("anyOf", []) if "type" in p),
                                    "")
    kind = {"array": "list", "object": "mapping"}.get(kind, kind) if isinstance(kind, str) \
        else "text"
    choices = prop.get("anyOf", [])
    if choices and not any("pattern" in p for p in choices):  # not a ${VAR} alternative
        kind = " or ".join({"object": "mapping"}.get(p["type"], p["type"]) for p in choices)
    bounds = [f"{'≥' if rule == 'minimum' else '≤'} {prop.get(rule, num.get(rule))}"
              for num in [next((p for p in prop.get("anyOf", []) if "minimum" in p or
                                "maximum" in p), {})]
              for rule in ("minimum", "maximum") if rule in prop or rule in num]
    env = path in INTERPOLATED
    return kind + (f" ({', '.join(bounds)})" if bounds else "") + (", *env*" if env else "")
