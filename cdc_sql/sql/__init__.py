"""The SQL that moves data lives in the .sql files beside this module.

A template's `{{ name }}` holes take SQL fragments that the caller built from identifiers quoted
by sqlglot (`quote`) or from the checked, transpiled projection; user values never go into a
template: they are bound as named parameters (`:name`) when the statement runs.
"""
from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from sqlglot import exp

_HOLE = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@cache
def template(name: str) -> str:
    return (Path(__file__).parent / f"{name}.sql").read_text()


def render(name: str, **fragments: str) -> str:
    text = template(name)
    missing = {m.group(1) for m in _HOLE.finditer(text)} - set(fragments)
    if missing:
        raise KeyError(f"{name}.sql needs {', '.join(sorted(missing))}")
    return _HOLE.sub(lambda m: fragments[m.group(1)], text)


def quote(name: str) -> str:
    """A Spark SQL identifier, quoted by sqlglot (backticks doubled inside)."""
    return exp.to_identifier(name, quoted=True).sql(dialect="spark")


def string_literal(value: str) -> str:
    """A Spark SQL string literal, escaped by sqlglot (for values SQL statements cannot bind)."""
    return exp.Literal.string(value).sql(dialect="spark")
