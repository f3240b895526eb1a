"""What a DDL statement from the binlog does to the captured tables.

Capture ends its pass after a DDL that touches a captured table (or might: a statement sqlglot
cannot read counts as touching every captured table of its database), so the run reads the
tables' definitions again before it goes on; a TRUNCATE is kept in bronze as op `truncate`.

Source statements are the source's, not ours to spread: one about accounts (CREATE USER ...
IDENTIFIED BY, GRANT, SET PASSWORD) touches no table and is neither kept nor logged, and a
statement bronze keeps is `redacted` (its literals and comments left out). sqlglot, which warns
with the whole statement it cannot read, is kept from logging (docs/security.md).
"""
from __future__ import annotations

import logging
import re

import sqlglot
from sqlglot import exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.tokens import TokenType

log = logging.getLogger(__name__)
logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its warnings quote the statement

_ACCOUNTS = re.compile(r"(\s|/\*.*?\*/)*((CREATE|ALTER|DROP|RENAME)\s+(USER|ROLE)|GRANT|REVOKE|"
                       r"SET\s+(PASSWORD|DEFAULT\s+ROLE|ROLE))\b", re.IGNORECASE | re.DOTALL)
_LITERALS = {TokenType.STRING, TokenType.NATIONAL_STRING, TokenType.HEX_STRING,
             TokenType.BIT_STRING, TokenType.BYTE_STRING, TokenType.RAW_STRING,
             TokenType.NATIONAL_RAW_STRING, TokenType.UNICODE_STRING, TokenType.HEREDOC_STRING}
UNREADABLE = "/* a statement sqlglot cannot read: not kept */"


def redacted(statement: str) -> str:
    """The statement with every string literal written '?' and its comments left out: what
    silver reads of it (names, renames, TRUNCATE) stays, what a DEFAULT, COMMENT or password
    held does not."""
    try:
        tokens = MySQL().tokenize(statement)
    except sqlglot.errors.SqlglotError:
        return UNREADABLE
    parts, end = [], 0
    for token in tokens:
        gap = statement[end:token.start]
        parts.append(gap if not gap.strip() else " ")  # a comment between tokens
        parts.append("'?'" if token.token_type in _LITERALS else
                     statement[token.start:token.end + 1])
        end = token.end + 1
    return "".join(parts)


def touched_tables(statement: str, default_db: str) -> set[tuple[str, str]] | None:
    """(db, table) pairs the statement names; None when it cannot tell."""
    if _ACCOUNTS.match(statement):
        return set()
    try:
        tree = sqlglot.parse_one(statement, read="mysql")
    except sqlglot.errors.SqlglotError:
        return None
    if tree is None or isinstance(tree, exp.Command):
        return None
    return {((t.db or default_db).lower(), t.name.lower()) for t in tree.find_all(exp.Table)}


def is_truncate(statement: str) -> bool:
    try:
        return isinstance(sqlglot.parse_one(statement, read="mysql"), exp.TruncateTable)
    except sqlglot.errors.SqlglotError:
        return False


def renamed_columns(statement: str) -> list[tuple[str, str]]:
    """(old, new) column names an ALTER TABLE renames (RENAME COLUMN, CHANGE old new ...)."""
    try:
        tree = sqlglot.parse_one(statement, read="mysql")
    except sqlglot.errors.SqlglotError:
        return []
    renames = []
    for action in tree.args.get("actions") or [] if isinstance(tree, exp.Alter) else []:
        if isinstance(action, exp.RenameColumn):
            renames.append((action.this.name, action.args["to"].name))
        elif isinstance(action, exp.ModifyColumn) and action.args.get("rename_from"):
            old, new = action.args["rename_from"].name, action.this.name
            if old.lower() != new.lower():
                renames.append((old, new))
    return renames
