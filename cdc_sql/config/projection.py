"""Projections: `SELECT ... FROM <table> [WHERE ...]`, checked and transpiled with sqlglot.

A projection maps one source row to one silver row, so it must be row-by-row and repeatable:
one table, no joins, subqueries, aggregates, windows or ordering, every primary-key column kept,
and only the functions of the allow-list below: deterministic built-ins without side effects
that exist in Spark SQL and in MySQL with the same results (silver computes them in Spark,
`verify` on the source), plus the functions registered from `udfs/`. Anything else (reflection,
file access, user, session or time functions, generators...) is refused with its name: a
pipeline file is edited by analysts, and a projection runs on the engine and on the source
(docs/security.md). The WHERE becomes a membership test: a row that stops matching leaves
silver, one that starts matching enters it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

import udfs
from cdc_sql.errors import ConfigError
from cdc_sql.sql import quote

DIALECTS = ("mysql", "spark")

# The allow-list, as sqlglot's expression classes (the names a projection may write for them are
# listed in docs/pipeline-yaml.md). tests/integration/test_projection_functions.py runs every one
# on MariaDB and on the engine and requires the same results.
ALLOWED_FUNCTIONS = {
    "strings": ("Upper", "Lower", "Concat", "ConcatWs", "Substring", "Trim", "Left", "Right",
                "Pad", "Replace", "Reverse", "Repeat", "StrPosition", "Hex", "Space"),
    "hashes": ("MD5", "SHA", "SHA2"),
    "conditions": ("Coalesce", "If", "Nullif", "Case", "And", "Or"),
    "numbers": ("Abs", "Round", "Floor", "Ceil", "Pow", "Sqrt", "Sign", "Exp", "Ln"),
    "dates": ("Year", "Month", "Day", "DayOfMonth", "Hour", "Minute", "Second", "TsOrDsToDate",
              "DateDiff", "DayOfWeek", "DayOfYear", "Quarter", "LastDay", "WeekOfYear"),
    "types": ("Cast",),
}
ALLOWED_NAMES = ("CRC32",)  # functions sqlglot does not model, by name
_ALLOWED_CLASSES = tuple(getattr(exp, name) for names in ALLOWED_FUNCTIONS.values()
                         for name in names)
_NON_DETERMINISTIC_CLASSES = tuple(
    getattr(exp, name) for name in (
        "Rand", "Randn", "Uuid", "CurrentDate", "CurrentTime", "CurrentTimestamp",
        "CurrentDatetime", "CurrentUser", "CurrentSchema", "UnixSeconds",
    ) if hasattr(exp, name)
)
_NON_DETERMINISTIC_NAMES = {
    "NOW", "SYSDATE", "CURDATE", "CURTIME", "UTC_DATE", "UTC_TIME", "UTC_TIMESTAMP",
    "LOCALTIME", "LOCALTIMESTAMP", "UNIX_TIMESTAMP", "RAND", "RANDOM", "RANDN", "UUID",
    "UUID_SHORT", "CONNECTION_ID", "LAST_INSERT_ID", "USER", "CURRENT_USER", "SESSION_USER",
    "SYSTEM_USER", "FOUND_ROWS", "ROW_COUNT", "SLEEP", "MONOTONICALLY_INCREASING_ID",
    "SPARK_PARTITION_ID", "INPUT_FILE_NAME", "SHUFFLE", "CURRENT_TIMEZONE", "CURRENT_DATABASE",
}
# Every other node a projection may hold: its structure, column references, literals and
# operators. Anything else is refused by name, parameters, placeholders and session variables
# (`:name`, `?`, `@@hostname`, `@x := id`, Spark's `${env:...}`) first among them: they would
# read the session or the job's environment, not the row.
_KNOWN_NODES = tuple(getattr(exp, name) for name in (
    "Select", "From", "Where", "Table", "TableAlias", "Identifier", "Column", "Alias", "Star",
    "Paren", "Literal", "Boolean", "Null", "HexString", "BitString", "DataType",
    "DataTypeParam", "Var", "Interval", "EQ", "NEQ", "NullSafeEQ", "NullSafeNEQ", "GT", "GTE",
    "LT", "LTE", "Add", "Sub", "Mul", "Div", "IntDiv", "Mod", "Neg", "Not", "Is", "In",
    "Between", "Like", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
    "BitwiseLeftShift", "BitwiseRightShift"))
_VARIABLES = tuple(getattr(exp, name) for name in ("Parameter", "Placeholder",
                                                    "SessionParameter", "PropertyEQ"))
# What a projection is made of: the select list, FROM <table> [AS alias], WHERE. Any other
# clause (QUALIFY, OFFSET, FOR UPDATE, TABLESAMPLE, PARTITION (p0), FORCE INDEX...) would be
# ignored by silver or change what `verify` reads: an analyst's filter must never silently do
# nothing, so it is refused by name.
_SELECT_PARTS = {"expressions", "from_", "from", "where"}
_CLAUSE_NAMES = {"locks": "a locking clause", "hints": "an index hint", "sample": "TABLESAMPLE",
                 "partition": "PARTITION", "version": "a time-travel clause",
                 "windows": "WINDOW", "operation_modifiers": "a SELECT modifier",
                 "laterals": "LATERAL VIEW", "cluster": "CLUSTER BY",
                 "distribute": "DISTRIBUTE BY", "sort": "SORT BY"}
_TABLE_PARTS = {"this", "db", "alias"}
_FORBIDDEN_CLAUSES = {
    "joins": "a JOIN (a projection reads one table)",
    "group": "GROUP BY (a projection maps one row to one row)",
    "having": "HAVING (a projection maps one row to one row)",
    "order": "ORDER BY (silver has no order)",
    "limit": "LIMIT (silver holds every matching row)",
    "distinct": "DISTINCT (a projection maps one row to one row)",
    "with_": "WITH (a projection reads one table)",
}


@dataclass(frozen=True)
class Projection:
    """A checked projection: Spark SQL pieces ready for the silver step."""

    columns: tuple[tuple[str, str], ...]  # (Spark SQL expression over source columns, output name)
    where: str | None                    # Spark SQL predicate, or None
    key: tuple[str, ...]                 # output names of the primary-key columns, in key order


def parse_projection(sql: str, table) -> exp.Select:
    """Parse (MySQL first, then Spark) and check what needs no database."""
    tree, first_error = None, None
    for dialect in DIALECTS:
        try:
            statements = sqlglot.parse(sql, read=dialect)
        except (ParseError, TokenError) as exc:  # TokenError: an unterminated string, say
            first_error = first_error or exc
            continue
        statements = [s for s in statements if s is not None]
        if len(statements) != 1:
            raise ConfigError("write exactly one SELECT statement")
        tree = statements[0]
        break
    if tree is None:
        detail = (getattr(first_error, "errors", None) or [{}])[0]
        where = f" at line {detail.get('line')}, column {detail.get('col')}" if detail else ""
        near = f" near `{detail.get('highlight')}`" if detail.get("highlight") else ""
        description = detail.get("description", str(first_error)).split(". Line")[0]
        if isinstance(first_error, TokenError):
            description = "a quote or comment that does not end"
        raise ConfigError(f"SQL syntax error{where}{near}: {description}")
    if not isinstance(tree, exp.Select):
        raise ConfigError(f"expected `SELECT ... FROM <table>`, got a {tree.key.upper()} statement")
    for clause, why in _FORBIDDEN_CLAUSES.items():
        if tree.args.get(clause):
            raise ConfigError(f"{why} is not allowed in a projection")
    _check_clauses(tree, _SELECT_PARTS)
    from_ = tree.args.get("from_") or tree.args.get("from")
    if from_ is None or not isinstance(from_.this, exp.Table):
        raise ConfigError("a projection needs `FROM <table>` naming its source table")
    tables = list(tree.find_all(exp.Table))
    if len(tables) != 1 or any(True for _ in tree.find_all(exp.Subquery)):
        raise ConfigError("a projection reads exactly one table (no joins or subqueries)")
    _check_clauses(from_.this, _TABLE_PARTS)
    parts = table.literal_parts if table is not None else None
    if parts and from_.this.name.lower() != parts[1].lower():
        raise ConfigError(f"FROM names `{from_.this.name}`, but the source table is `{parts[1]}` "
                          f"(write FROM {parts[1]})")
    for star in tree.find_all(exp.Star):
        _check_clauses(star, {"except_", "except"})
    for node in tree.find_all(exp.AggFunc):
        raise ConfigError(f"aggregate `{node.sql()}` is not allowed: a projection maps one row to one row")
    for node in tree.find_all(exp.Window):
        raise ConfigError(f"window function `{node.sql()}` is not allowed in a projection")
    for node in tree.find_all(exp.Func):
        name = node.name.upper() if isinstance(node, exp.Anonymous) else ""
        if isinstance(node, _NON_DETERMINISTIC_CLASSES) or name in _NON_DETERMINISTIC_NAMES:
            raise ConfigError(f"`{node.sql()}` is not deterministic: replaying a change must give "
                              f"the same silver row")
        _check_allowed(node, name)
    for node in tree.walk():
        if not isinstance(node, (exp.Func, *_KNOWN_NODES)):
            _refuse_node(node)
    return tree


def _check_clauses(node: exp.Expression, allowed: set[str]) -> None:
    for part, value in node.args.items():
        if part not in allowed and value not in (None, False, [], ""):
            items = value if isinstance(value, list) else [value]
            shown = " ".join(_sql(v) for v in items)
            clause = _CLAUSE_NAMES.get(part, part.upper().replace("_", " "))
            raise ConfigError(f"{clause} (`{_short(shown)}`) is not allowed in a projection: a "
                              f"projection is a select list, FROM <its table> and WHERE (a "
                              f"clause silver would not apply must not look as if it did)")


def _sql(node) -> str:
    """A node as MySQL writes it, else as Spark does (each lacks some of the other's)."""
    if not isinstance(node, exp.Expression):
        return str(node)
    return node.sql(dialect="mysql") or node.sql(dialect="spark") or node.key.upper()


def _refuse_node(node: exp.Expression) -> None:
    shown = _short(node.sql(dialect="mysql"))
    if isinstance(node, _VARIABLES):
        raise ConfigError(f"`{shown}` is not allowed in a projection: parameters, "
                          f"placeholders and session or environment variables read the "
                          f"session or the job, not the row")
    raise ConfigError(f"`{shown}` ({type(node).__name__}) is not allowed in a projection: it "
                      f"may hold columns, literals, operators, CAST and the functions listed "
                      f"in docs/pipeline-yaml.md")


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def _check_allowed(node: exp.Func, name: str) -> None:
    if isinstance(node, _ALLOWED_CLASSES) and not _converts_charset(node):
        return
    if name and (name in ALLOWED_NAMES or name.lower() in {u.lower() for u in udfs.UDFS}):
        return
    shown = _short(node.sql(dialect="mysql"))
    raise ConfigError(
        f"`{shown}` is not allowed in a projection: a projection may call the deterministic "
        f"built-ins that Spark SQL and MySQL both have with the same results (string, hash, "
        f"condition, number and date functions, CAST; the list is in docs/pipeline-yaml.md) "
        f"and the functions registered in udfs/. Functions that reach files, the session, "
        f"the clock or the JVM (LOAD_FILE, USER, NOW, reflect, java_method...) never are")


def _converts_charset(node) -> bool:
    """CONVERT(x USING cs) parses as a CAST that Spark cannot run."""
    return isinstance(node, exp.Cast) and "CHARACTER SET" in node.sql(dialect="mysql").upper()


def resolve_projection(table, columns: list[str], key: list[str]) -> Projection:
    """Check a projection against the source's columns and key; default is SELECT *."""
    tree = parse_projection(table.projection, table) if table.projection else _select_all()
    by_lower = {c.lower(): c for c in columns}
    source_name = tree.args.get("from_").this.alias_or_name.lower()

    def source_column(node: exp.Column) -> str:
        if node.table and node.table.lower() != source_name:
            raise ConfigError(f"column `{node.sql()}` names table `{node.table}`, which is not "
                              f"the projection's source")
        if node.name.lower() not in by_lower:
            raise ConfigError(f"column `{node.name}` does not exist in the source table "
                              f"(its columns: {', '.join(columns)})")
        return by_lower[node.name.lower()]

    output: list[tuple[str, str]] = []
    key_names: dict[str, str] = {}
    for item in tree.expressions:
        if isinstance(item, exp.Star):
            for column in star_columns(table, item, columns, key):
                output.append((quote(column), column))
                key_names.setdefault(column, column)
            continue
        inner = item.this if isinstance(item, exp.Alias) else item
        if isinstance(inner, exp.Column) and isinstance(inner.this, exp.Star):
            raise ConfigError("write `*`, not `table.*`")
        if not isinstance(item, exp.Alias) and not isinstance(item, exp.Column):
            raise ConfigError(f"give the expression `{item.sql()}` a name with AS")
        name = item.alias_or_name
        for column in inner.find_all(exp.Column):
            source_column(column)
        if isinstance(inner, exp.Column):
            key_names.setdefault(source_column(inner), name)
        output.append((_to_spark(inner, by_lower), name))
    seen: set[str] = set()
    for _, name in output:
        if name.lower() in seen:
            raise ConfigError(f"the projection names the column `{name}` twice")
        if name.lower().startswith("_cdc_"):
            raise ConfigError(f"`{name}`: names starting with _cdc_ are reserved for cdc-sql")
        seen.add(name.lower())
    missing = [k for k in key if k not in key_names]
    if missing:
        raise ConfigError(f"the projection drops the primary-key column `{missing[0]}`; keep every "
                          f"key column ({', '.join(key)}) so silver rows can be matched")
    where = tree.args.get("where")
    if where is not None:
        for column in where.find_all(exp.Column):
            source_column(column)
    return Projection(
        columns=tuple(output),
        where=_to_spark(where.this, by_lower) if where is not None else None,
        key=tuple(key_names[k] for k in key),
    )


@cache
def _select_all() -> exp.Select:
    """The default projection, parsed once (a pipeline of 10,000 tables parsed it 10,000
    times: 3.4 s of a run); read, never changed."""
    return parse_projection("SELECT * FROM t", None)


def star_columns(table, star: exp.Star, columns: list[str], key: list[str]) -> list[str]:
    """The source columns `*` stands for: all but those `EXCEPT (...)` and the table's
    `exclude_columns` leave out, each of which must exist and none be a key column."""
    by_lower = {c.lower(): c for c in columns}
    left_out = [(c.name, "EXCEPT") for c in star.args.get("except_") or []] + \
        [(name, "exclude_columns") for name in getattr(table, "exclude_columns", [])]
    for name, where in left_out:
        path = "exclude_columns" if where == "exclude_columns" else None
        if name.lower() not in by_lower:
            raise ConfigError(f"{where} names `{name}`, which the source table does not have "
                              f"(its columns: {', '.join(columns)})", path=path)
        if by_lower[name.lower()] in key:
            raise ConfigError(f"{where} leaves out the key column `{name}`: silver rows are "
                              f"matched by it (keep every key column: {', '.join(key)})",
                              path=path)
    gone = {name.lower() for name, _ in left_out}
    return [c for c in columns if c.lower() not in gone]


def _to_spark(node: exp.Expression, by_lower: dict[str, str]) -> str:
    """Spark SQL for an expression over the source columns (qualifiers dropped, names exact)."""
    def rewrite(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column):
            return exp.column(by_lower[n.name.lower()], quoted=True)
        return n

    return node.copy().transform(rewrite).sql(dialect="spark")

