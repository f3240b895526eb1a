"""What a DDL statement from the binlog does to the captured tables.

Capture ends its pass after a DDL that touches a captured table (or might: a statement sqlglot
cannot read counts as touching every captured table of its database), so the run reads the
tables' definitions again before it goes on; a TRUNCATE is kept in bronze as op `truncate`.
"""
from __future__ import annotations

import logging

import sqlglot
from sqlglot import exp

log = logging.getLogger(__name__)


def touched_tables(statement: str, default_db: str) -> set[tuple[str, str]] | None:
    """(db, table) pairs the statement names; None when it cannot tell."""
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
