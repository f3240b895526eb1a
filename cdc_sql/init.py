"""`cdc-sql init URL`: a commented starter pipeline, read from the source.

It lists the database's tables with their keys (a table without one is left commented out with a
`primary_key:` stub to fill in), says what the server's binlog settings lack, and gives the
grants the pipeline needs, so the first `validate` passes and the rest is a matter of editing.
"""
from __future__ import annotations

import json
import re
import urllib.parse
from dataclasses import dataclass

from cdc_sql.config.model import Source
from cdc_sql.errors import ConfigError, SourceError, hide
from cdc_sql.source import mysql, preflight
from cdc_sql.source.schema import TABLE_TYPES, read_table

PASSWORD_VARIABLE = "MYSQL_PASSWORD"


@dataclass(frozen=True)
class Found:
    """A table of the source: its key, or why it has none."""

    name: str
    key: tuple[str, ...]
    columns: tuple[str, ...]
    index: str = ""  # the unique index on NOT NULL columns the key is, with no primary key


def parse_url(url: str, password: str = "") -> tuple[Source, str]:
    """`mysql://user@host:port/db` -> (Source, db). A password in the URL is refused: it would
    end up in shell history; it comes from the environment. The URL is repeated in messages
    with its password part, if any, as ***."""
    expected = f"init: expected mysql://user@host[:port]/database, got {redact_url(url)!r}"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or 3306
    except ValueError as exc:  # a port out of range or not a number, a broken [IPv6] host
        raise ConfigError(f"{expected} ({exc})") from None
    if parts.password is not None and "@" in parts.netloc:
        raise ConfigError(f"init: put the password in ${PASSWORD_VARIABLE}, not in the URL "
                          f"({redact_url(url)})")
    if parts.scheme not in ("mysql", "mariadb") or not parts.hostname or not parts.username:
        raise ConfigError(expected)
    database = parts.path.strip("/")
    if not database or "/" in database:
        raise ConfigError("init: the URL must name one database: mysql://user@host:port/db")
    hide(password, f"${PASSWORD_VARIABLE}", minimum=4)
    source = Source(host=parts.hostname, user=urllib.parse.unquote(parts.username),
                    port=port, password=password)
    return source, urllib.parse.unquote(database)


def redact_url(url: str) -> str:
    """`scheme://user:secret@host` -> `scheme://user:***@host` (without parsing: a URL too
    broken to parse may still hold a password)."""
    return re.sub(r"(//[^/@]*?:)[^/@]*@", r"\1***@", url)


def table_pattern(pattern: str | None) -> re.Pattern | None:
    """--tables, checked before the source is asked anything."""
    try:
        return re.compile(pattern) if pattern else None
    except re.error as exc:
        raise ConfigError(f"init: --tables {pattern!r} is not a regular expression ({exc})") \
            from None


def read_source(source: Source, database: str, pattern: str | None) -> tuple[list[Found], bool,
                                                                          list[str]]:
    """The database's tables (those whose name matches `pattern`), whether it is MariaDB, and
    what its binlog settings lack."""
    matcher = table_pattern(pattern)
    with mysql.cursor(source) as cur:
        mariadb = mysql.is_mariadb(cur)
        try:
            problems = preflight.check_binlog_settings(cur, "initial")
        except SourceError as exc:
            problems = [str(exc)]
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                    f"AND TABLE_TYPE IN {TABLE_TYPES} ORDER BY TABLE_NAME", (database,))
        names = [row[0] for row in cur.fetchall()
                 if matcher is None or matcher.fullmatch(row[0])]
        if not names:
            raise SourceError(f"init: no tables in `{database}`"
                              + (f" match --tables {pattern!r}" if pattern else ""))
        found = []
        for name in names:
            try:
                table = read_table(cur, database, name)
                found.append(Found(name, table.key, tuple(c.name for c in table.columns),
                                   table.key_index))
            except SourceError:  # no key: listed for the user to declare one
                cur.execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE "
                            "TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                            (database, name))
                found.append(Found(name, (), tuple(r[0] for r in cur.fetchall())))
    return found, mariadb, problems


def starter_yaml(source: Source, database: str, tables: list[Found], mariadb: bool,
                 problems: list[str]) -> str:
    """The pipeline file, comments included."""
    grants = preflight.needed_grants(source.user, mariadb, "initial", [database])
    lines = [
        "# yaml-language-server: $schema=pipeline.schema.json",
        f"# A starter pipeline for `{database}`, written by `cdc-sql init`. Check it with",
        "#   cdc-sql validate THIS_FILE",
        "# Reference: docs/pipeline-yaml.md. Grants the user needs (run them as an admin):",
        *(f"#   {grant};  -- {why}" for grant, why in grants),
    ]
    if problems:
        lines.append("# The source's binlog needs fixing before capture can run:")
        lines += [f"#   {problem}" for problem in problems]
    name = re.sub(r"[^A-Za-z0-9_]", "_", database) or "pipeline"
    lines += [
        f"name: {name}",
        "source:",
        f"  host: {source.host}",
        f"  port: {source.port}",
        f"  user: {_scalar(source.user)}",
        f"  password: ${{{PASSWORD_VARIABLE}}}   # from the environment; or password_file:",
        "  server_id: 5400              # unique among the server's replicas",
        "  startup: initial             # snapshot every table, then follow the binlog",
        "target:",
        "  path: ./lakehouse            # Delta root (a local path, a volume or s3://...)",
        "tables:",
    ]
    for table in tables:
        source_name = f"{_quoted(database)}.{_quoted(table.name)}"
        silver = re.sub(r"[^A-Za-z0-9_]", "_", table.name)
        silver = silver if re.match(r"[A-Za-z_]", silver) else f"t_{silver}"
        if table.key and table.index:  # pinned: another index added later changes nothing
            lines += [f"  - name: {silver}",
                      f"    source: {_scalar(source_name)}",
                      f"    primary_key: [{', '.join(_scalar(k) for k in table.key)}]   # the "
                      f"unique index {table.index} on NOT NULL columns: no primary key"]
        elif table.key:
            lines += [f"  - name: {silver}",
                      f"    source: {_scalar(source_name)}   # key: {', '.join(table.key)}"]
        else:
            lines += [f"  # {table.name} has no primary key and no unique NOT NULL key: name the "
                      f"columns that identify a row, then uncomment",
                      f"  # - name: {silver}",
                      f"  #   source: {_scalar(source_name)}",
                      f"  #   primary_key: [{table.columns[0] if table.columns else ''}]"
                      f"   # columns: {', '.join(table.columns)}"]
    return "\n".join(lines) + "\n"


def _quoted(name: str) -> str:
    """A name as a literal `source:` part: plain when it can be, else in backticks."""
    return name if re.fullmatch(r"[A-Za-z0-9_$]+", name) else "`" + name.replace("`", "``") + "`"


def _scalar(text: str) -> str:
    """A YAML scalar that reads back as `text`."""
    return text if re.fullmatch(r"[A-Za-z0-9_.$@-]+", text) else json.dumps(text)
