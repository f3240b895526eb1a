"""A JSON Schema for pipeline YAML, generated from the config model (model.py), so editors
autocomplete and check pipeline files with the same rules `validate --offline` applies to keys,
types, ranges and choices. SQL and regular expressions are checked by `validate` only.

`cdc-sql schema` prints it; pipelines/pipeline.schema.json is the committed copy (a test keeps it
in sync).
"""
from __future__ import annotations

import json
import typing
from dataclasses import MISSING, fields
from typing import Any

from cdc_sql.config.loader import INTERPOLATED
from cdc_sql.config.model import Pipeline

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
        child = f"{path}.{spec.name}" if path else spec.name
        properties[spec.name] = _property(hints[spec.name], spec.metadata, child, is_required)
        if is_required:
            required.append(spec.name)
        elif spec.default is not MISSING and isinstance(spec.default, (str, int, float, bool)):
            properties[spec.name]["default"] = spec.default
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _property(hint: Any, rules: dict, path: str, required: bool = False) -> dict:
    doc = {"description": rules["doc"]} if "doc" in rules else {}
    not_empty = {"minItems": 1} if required else {}
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return {**doc, "type": "array", "items": _property(item, {}, f"{path}[]"), **not_empty}
    if hasattr(hint, "__dataclass_fields__"):
        return {**_object(hint, path), **doc}
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
