"""The SQL that moves data lives in the .sql files beside this module.

A template's `{{ name }}` holes take SQL fragments that the caller built from identifiers quoted
by sqlglot (`quote`) or from the checked, transpiled projection; user values never go into a
template: they are bound as named parameters (`:name`) when the statement runs.
"""
from __future__ import annotations

import re
from functools import cache, lru_cache
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


@lru_cache(maxsize=2**16)
def quote(name: str) -> str:
    """A Spark SQL identifier, quoted by sqlglot (backticks doubled inside); the same names
    come back for every table of a pipeline, and sqlglot's generator takes 0.1 ms a name."""
    return exp.to_identifier(name, quoted=True).sql(dialect="spark")


def string_literal(value: str) -> str:
    """A Spark SQL string literal, escaped by sqlglot (for values SQL statements cannot bind)."""
    return exp.Literal.string(value).sql(dialect="spark")


# Outside quoted text and comments, a named parameter marker `:name` (not `::` casts).
_MARKERS = re.compile(r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`(?:[^`]|``)*`|--[^\n]*|/\*.*?\*/)"""
                      r"""|(?<![:\w]):([A-Za-z_]\w*)""", re.S)


def inline(sql: str, args: dict) -> str:
    """`sql` with its parameter markers replaced by their values as SQL literals: for an engine
    that leaves bound parameters unbound (Spark 4.1 with Delta 4.4's SQL parser, engine.py).
    Quoted text, quoted identifiers and comments are left as they are."""
    def replace(match: re.Match) -> str:
        if match.group(1) or match.group(2) not in args:
            return match.group(0)
        return sql_literal(args[match.group(2)])

    return _MARKERS.sub(replace, sql)


def sql_literal(value) -> str:
    """A Spark SQL literal of a bound value's own type (what binding it would give)."""
    import datetime as dt
    import decimal

    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"CAST({string_literal(repr(value))} AS DOUBLE)"
    if isinstance(value, decimal.Decimal):
        return f"{value}BD"
    if isinstance(value, dt.datetime):
        kind = "TIMESTAMP_NTZ" if value.tzinfo is None else "TIMESTAMP"
        return f"{kind} {string_literal(value.isoformat(sep=' '))}"
    if isinstance(value, dt.date):
        return f"DATE {string_literal(value.isoformat())}"
    if isinstance(value, (bytes, bytearray)):
        return f"X'{bytes(value).hex()}'"
    if isinstance(value, str):
        return string_literal(value)
    raise TypeError(f"no SQL literal for a {type(value).__name__}")
