"""A range re-read's predicate (`cdc-sql resnapshot --where`, `verify --repair`): checked once
by sqlglot, then run on both sides with its values bound.

The source reads the rows matching it at a watermark; silver removes, at that watermark, the
rows matching it that the read did not return (docs/operations.md, "Repairing rows"). That is
only right when both sides select the same keys, and when a row matching it at one offset
matches it at every other: so it may name only key columns of the table (an update never moves
a key out of a range: a key change is a delete and an insert), compared with literals. MySQL
compares strings in their collation (case and trailing spaces folded), Spark by code point: a
string key column may only be equal to a literal or IN a list, never negated, so Spark never
selects a key MySQL does not (a key silver would remove while the source still has it).

Allowed: key columns, number and string literals, TRUE/FALSE/NULL, comparisons, AND/OR/NOT,
BETWEEN, IN (a list), IS [NOT] NULL, parentheses. Everything else (functions, subqueries,
variables, comments, several statements) is refused with one line naming the table and what.
"""
from __future__ import annotations

import decimal
from typing import Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from cdc_sql.errors import ConfigError
from cdc_sql.source.schema import SourceTable

_NUMERIC = {"tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "year"}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_ALLOWED = (exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Paren,
            exp.And, exp.Or, exp.Not, exp.Between, exp.In, exp.Is, exp.Neg, *_COMPARISONS)
_TESTS = (exp.And, exp.Or, exp.Not, exp.Between, exp.In, exp.Is, exp.Boolean, *_COMPARISONS)
_VALUES = (exp.Column, exp.Literal, exp.Neg, exp.Null, exp.Boolean)
_WHAT = {exp.Anonymous: "a function", exp.Func: "a function", exp.Subquery: "a subquery",
         exp.Select: "a subquery", exp.Parameter: "a variable",
         exp.SessionParameter: "a variable", exp.Placeholder: "a placeholder",
         exp.Star: "`*`", exp.Tuple: "a row constructor"}


def check(text: str, table: SourceTable) -> str:
    """The predicate `text` as canonical MySQL (what state keeps), or a ConfigError of one
    line naming the table and what is wrong with it."""
    where = f"--where {text!r} on {table.qualified}"
    tree = _parse(text, where)
    for node in tree.walk():
        if node.comments:
            raise ConfigError(f"{where}: comments are not allowed")
        if not isinstance(node, _ALLOWED):
            what = next((w for kind, w in _WHAT.items() if isinstance(node, kind)),
                        f"`{node.sql(dialect='mysql')[:40]}`")
            raise ConfigError(f"{where}: {what} is not allowed (key columns, literals, "
                              f"comparisons, AND/OR/NOT, BETWEEN, IN, IS NULL only)")
        if isinstance(node, exp.Column):
            _check_column(node, table, where)
        if isinstance(node, exp.Neg) and not _number(node.this):
            raise ConfigError(f"{where}: `-` applies to a number only")
    for node in tree.walk():
        _check_operands(node, where)
    if not isinstance(_bare(tree), _TESTS):
        raise ConfigError(f"{where}: not a condition (compare a key column with a value)")
    if not any(isinstance(node, exp.Column) for node in tree.walk()):
        raise ConfigError(f"{where}: it names no column of the table")
    return tree.sql(dialect="mysql")


def _parse(text: str, where: str) -> exp.Expression:
    if not text.strip():
        raise ConfigError(f"{where}: it is empty")
    if any(mark in text for mark in ("--", "/*", "#", ";")):
        raise ConfigError(f"{where}: comments and several statements are not allowed")
    try:
        trees = sqlglot.parse(f"SELECT 1 WHERE {text}", read="mysql")
    except (ParseError, TokenError) as exc:
        detail = str(exc).splitlines()[0][:120]
        raise ConfigError(f"{where}: not a MySQL predicate ({detail})") from None
    select = trees[0] if len(trees) == 1 else None
    if not isinstance(select, exp.Select) or select.args.get("where") is None or \
            set(k for k, v in select.args.items() if v) != {"expressions", "where"}:
        raise ConfigError(f"{where}: not a single predicate")
    return select.args["where"].this


def _bare(node: exp.Expression) -> exp.Expression:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _check_operands(node: exp.Expression, where: str) -> None:
    """AND, OR and NOT join conditions; comparisons, BETWEEN, IN and IS compare values (a
    column is no condition in Spark, a condition no value)."""
    if isinstance(node, exp.Paren):
        return
    wanted = _TESTS if isinstance(node, (exp.And, exp.Or, exp.Not)) else \
        _VALUES if isinstance(node, _TESTS) else None
    if wanted is None:
        return
    for child in node.iter_expressions():
        if not isinstance(_bare(child), wanted):
            raise ConfigError(f"{where}: `{child.sql(dialect='mysql')[:40]}` is not a "
                              f"{'condition' if wanted is _TESTS else 'column or value'} "
                              f"where `{node.key.upper()}` wants one")


def _check_column(node: exp.Column, table: SourceTable, where: str) -> None:
    if node.table or node.args.get("db"):
        raise ConfigError(f"{where}: name columns without a table (`{node.name}`)")
    by_name = {c.name.lower(): c for c in table.columns}
    column = by_name.get(node.name.lower())
    if column is None:
        raise ConfigError(f"{where}: the table has no column `{node.name}`")
    if column.name not in table.key:
        raise ConfigError(
            f"{where}: `{column.name}` is not a key column ({', '.join(table.key)}): a range "
            f"of other columns cannot tell a row deleted at the source from one that left it")
    node.this.set("this", column.name)
    if column.data_type in _NUMERIC:
        return
    if column.data_type in {"date", "datetime", "timestamp", "time", "float", "double"}:
        raise ConfigError(f"{where}: key column `{column.name}` is {column.data_type}: "
                          f"name integer, decimal or string key columns only")
    parent, inside = node.parent, node
    while isinstance(parent, exp.Paren):
        parent, inside = parent.parent, parent
    if not (isinstance(parent, exp.EQ) or isinstance(parent, exp.In) and
            parent.this is inside) or _negated(parent):
        raise ConfigError(f"{where}: string key column `{column.name}` may only be `=` a "
                          f"value or IN a list, not negated (MySQL's collation and Spark "
                          f"order and compare strings differently)")


def _negated(node: exp.Expression) -> bool:
    return any(isinstance(up, exp.Not) for up in _ancestors(node))


def _ancestors(node: exp.Expression):
    while node.parent is not None:
        node = node.parent
        yield node


def _number(node: exp.Expression) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string


def columns(text: str) -> set[str]:
    """The columns a checked predicate names."""
    return {c.name for c in sqlglot.parse_one(text, read="mysql").find_all(exp.Column)}


def bound(text: str, dialect: str, placeholder: Callable[[int], str],
          literal: Callable | None = None, percent_doubled: bool = False) -> tuple[str, list]:
    """A checked predicate in `dialect` (mysql or spark) with its values taken out: each
    becomes `placeholder(i)` and its Python value is the i-th of the list (or, given a
    `literal` escaping function, the value is written in by it and the list is empty).
    `percent_doubled`: column names' `%` doubled, for SQL whose values pymysql binds into
    `%s` (values are all taken out, so names alone may hold one)."""
    tree = sqlglot.parse_one(text, read="mysql")
    values: list = []

    def take(node: exp.Expression) -> exp.Expression:
        if percent_doubled and isinstance(node, exp.Identifier):
            return exp.to_identifier(node.name.replace("%", "%%"), quoted=True)
        if isinstance(node, exp.Neg) and _number(node.this):
            value = -_value(node.this)
        elif isinstance(node, exp.Literal) and not isinstance(node.parent, exp.Neg):
            value = _value(node)
        else:
            return node
        if literal is not None:
            return exp.var(literal(value))
        values.append(value)
        return exp.var(placeholder(len(values) - 1))

    return tree.transform(take).sql(dialect=dialect, identify=True), values


def _value(node: exp.Literal):
    if node.is_string:
        return node.this
    text = node.this
    try:
        return int(text)
    except ValueError:
        return decimal.Decimal(text)
