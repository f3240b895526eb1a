"""What a statement from the binlog does to the captured tables.

Capture ends its pass after a DDL that touches a captured table (or might: a statement sqlglot
cannot read counts as touching every captured table of its database), so the run reads the
tables' definitions again before it goes on; a TRUNCATE is kept in bronze as op `truncate`.

Source statements are the source's, not ours to spread: one about accounts (CREATE USER ...
IDENTIFIED BY, GRANT, SET PASSWORD) touches no table and is neither kept nor logged, and a
statement bronze keeps is `redacted` (its literals and comments left out). sqlglot, which warns
with the whole statement it cannot read, is kept from logging (docs/security.md).

Statements that are not DDL (transaction control, XA, DML the source wrote as a statement) and
partition maintenance are told apart here too, without sqlglot where it has no grammar for
them. The reader's fallback for a statement sqlglot cannot read is safe.
"""
from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass

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


@functools.lru_cache(maxsize=512)
def _parse(statement: str):
    """The statement's tree (shared: do not change it), None when sqlglot cannot read it."""
    try:
        return sqlglot.parse_one(statement, read="mysql")
    except sqlglot.errors.SqlglotError:
        return None


def touched_tables(statement: str, default_db: str) -> set[tuple[str, str]] | None:
    """(db, table) pairs the statement names; None when it cannot tell."""
    if _ACCOUNTS.match(statement):
        return set()
    tree = _parse(statement)
    if tree is None or isinstance(tree, exp.Command):
        return None
    if isinstance(tree, exp.Create) and tree.this is not None:  # CREATE ... LIKE t reads t
        tree = tree.this
    return {((t.db or default_db).lower(), t.name.lower()) for t in tree.find_all(exp.Table)}


def is_truncate(statement: str) -> bool:
    return isinstance(_parse(statement), exp.TruncateTable)


def renamed_columns(statement: str) -> list[tuple[str, str]]:
    """(old, new) column names an ALTER TABLE renames (RENAME COLUMN, CHANGE old new ...)."""
    tree = _parse(statement)
    renames = []
    for action in tree.args.get("actions") or [] if isinstance(tree, exp.Alter) else []:
        if isinstance(action, exp.RenameColumn):
            renames.append((action.this.name, action.args["to"].name))
        elif isinstance(action, exp.ModifyColumn) and action.args.get("rename_from"):
            old, new = action.args["rename_from"].name, action.this.name
            if old.lower() != new.lower():
                renames.append((old, new))
    return renames


# -- statements that are not DDL: transactions, XA, DML written as statements -----------------
_NAME = r"(?:`(?:[^`]|``)+`|[\w$]+)"
_QUALIFIED = rf"({_NAME}(?:\s*\.\s*{_NAME})?)"
_ALTER_TABLE_WORDS = r"ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE"  # the head of every ALTER TABLE
_INSERT = re.compile(rf"(?:INSERT|REPLACE)\s+(?:(?:LOW_PRIORITY|DELAYED|HIGH_PRIORITY|IGNORE)\s+)*"
                     rf"(?:INTO\s+)?{_QUALIFIED}", re.I)
_LOAD = re.compile(rf"LOAD\s+(?:DATA|XML)\b.*?\bINTO\s+TABLE\s+{_QUALIFIED}", re.I | re.S)
_XA = re.compile(r"XA\s+(START|BEGIN|END|PREPARE|COMMIT|ROLLBACK)\b\s*(.*)", re.I | re.S)
_DML = ("INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD")


_COMMENT = re.compile(r"""('(?:[^'\\]|\\.|'')*'|`(?:[^`]|``)*`|"(?:[^"\\]|\\.)*")"""
                      r"|/\*!\d*(.*?)\*/|/\*.*?\*/", re.S)


def without_comments(statement: str) -> str:
    """The statement with its comments (/* gh-ost */) blanked out, the SQL in executable ones
    (/*!50001 ... */) kept, quoted strings and names untouched: what the patterns here read."""
    return _COMMENT.sub(lambda m: m.group(1) if m.group(1) is not None else
                        f" {m.group(2)} " if m.group(2) is not None else " ", statement).strip()


def statement_kind(statement: str) -> str:
    """What a query event's statement is to the reader: `begin`, `commit`, `rollback`,
    `savepoint` (SAVEPOINT, ROLLBACK TO, RELEASE: inside a transaction), `xa_start`, `xa_end`,
    `xa_prepare`, `xa_commit`, `xa_rollback`, `dml` (written as a statement: binlog_format
    STATEMENT or MIXED), or `ddl` (anything else)."""
    words = statement.lstrip(" \t\r\n(").split(None, 3)
    first = words[0].upper() if words else ""
    second = words[1].upper() if len(words) > 1 else ""
    if first == "BEGIN" or (first, second) == ("START", "TRANSACTION"):
        return "begin"
    if first == "COMMIT":
        return "commit"
    if first == "ROLLBACK":
        return "savepoint" if second.startswith("TO") else "rollback"
    if first in ("SAVEPOINT", "RELEASE"):
        return "savepoint"
    if first == "XA":
        return {"BEGIN": "xa_start"}.get(second, f"xa_{second.lower()}")
    if first in _DML or first == "WITH" and re.search(r"\b(UPDATE|DELETE)\b", statement, re.I):
        return "dml"
    return "ddl"


def xa_id(statement: str) -> str:
    """The XID an XA statement names, as XA_PREPARE events give it (binlog_events.xid_text):
    from hex literals (as servers write them) or quoted strings, the format id 1 unless
    given."""
    match = _XA.match(statement.strip())
    rest = re.sub(r"\s+ONE\s+PHASE\s*$", "", match.group(2).strip() if match else "",
                  flags=re.I)
    parts, fmt = [], 1
    for token in re.finditer(r"[Xx]'([0-9A-Fa-f]*)'|'((?:[^'\\]|\\.|'')*)'|(\d+)", rest):
        hexed, quoted, number = token.groups()
        if number is not None:
            fmt = int(number)
        elif token.group(0)[0] in "Xx":
            parts.append(bytes.fromhex(hexed))
        else:
            parts.append(quoted.replace("''", "'").encode())
    gtrid, bqual = (parts + [b"", b""])[:2]
    return f"X'{gtrid.hex()}',X'{bqual.hex()}',{fmt}"


def dml_targets(statement: str, default_db: str) -> set[tuple[str, str]] | None:
    """(db, table) pairs a DML statement may change; None when it cannot tell. INSERT,
    REPLACE and LOAD DATA change the one table they name; UPDATE and DELETE are read by
    sqlglot (every table of a multi-table UPDATE counts)."""
    text = statement.strip()
    match = _INSERT.match(text) or _LOAD.match(text)
    if match:
        return {_split_name(match.group(1), default_db)}
    tree = _parse(text)
    if isinstance(tree, exp.Delete):
        tables = tree.args.get("tables") or [tree.this]
        return {((t.db or default_db).lower(), t.name.lower()) for t in tables
                if isinstance(t, exp.Table)}
    if isinstance(tree, exp.Update):
        return {((t.db or default_db).lower(), t.name.lower())
                for t in tree.this.find_all(exp.Table)}
    return None


def _split_name(text: str, default_db: str) -> tuple[str, str]:
    parts = re.findall(r"`((?:[^`]|``)+)`|([\w$]+)", text)
    names = [(q.replace("``", "`") or p) for q, p in parts]
    db, table = (names[0], names[1]) if len(names) > 1 else (default_db, names[0])
    return db.lower(), table.lower()


# -- RENAME TABLE ------------------------------------------------------------------------------
_RENAME = re.compile(r"RENAME\s+TABLES?\s+(?:IF\s+EXISTS\s+)?(.*)", re.I | re.S)
_RENAME_PAIR = re.compile(rf"\s*{_QUALIFIED}\s+(?:WAIT\s+\d+\s+|NOWAIT\s+)?TO\s+{_QUALIFIED}\s*"
                          rf"(?:,|$)", re.I)
_ALTER_RENAME = re.compile(rf"{_ALTER_TABLE_WORDS}\s+(?:IF\s+EXISTS\s+)?"
                           rf"{_QUALIFIED}\s+RENAME\s+(?:TO\s+|AS\s+)?{_QUALIFIED}\s*$", re.I)


def renames(statement: str, default_db: str) -> list[tuple[tuple[str, str], tuple[str, str]]] | None:
    """The (from, to) table names a RENAME TABLE (or ALTER TABLE ... RENAME TO) moves, in the
    order the server applies them (a swap: t TO t_old, t_new TO t); None for another
    statement."""
    text = statement.strip()
    match = _ALTER_RENAME.match(text)
    if match:
        return [(_split_name(match.group(1), default_db), _split_name(match.group(2), default_db))]
    match = _RENAME.match(text)
    if not match:
        return None
    pairs, rest = [], match.group(1).strip()
    while rest:
        pair = _RENAME_PAIR.match(rest)
        if not pair:
            return None
        pairs.append((_split_name(pair.group(1), default_db),
                      _split_name(pair.group(2), default_db)))
        rest = rest[pair.end():].strip()
    return pairs or None


# -- partition maintenance: rows change without row events -------------------------------------
_PARTITION = re.compile(
    rf"{_ALTER_TABLE_WORDS}\s+(?:IF\s+EXISTS\s+)?{_QUALIFIED}\s+"
    rf"(TRUNCATE|DROP|EXCHANGE|REORGANIZE|COALESCE|REBUILD|ADD|ANALYZE|CHECK|OPTIMIZE|REPAIR|"
    rf"REMOVE|CONVERT)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?(PARTITIONING|PARTITION|TABLE)\b\s*(.*)",
    re.I | re.S)
_WITH_TABLE = re.compile(rf"WITH\s+TABLE\s+{_QUALIFIED}", re.I)


@dataclass(frozen=True)
class PartitionChange:
    """An ALTER TABLE that works on partitions: `action` (TRUNCATE, DROP, EXCHANGE, ...),
    the partitions it names (("ALL",) for TRUNCATE PARTITION ALL), and the table a partition
    is exchanged with."""

    table: tuple[str, str]
    action: str
    partitions: tuple[str, ...] = ()
    other: tuple[str, str] | None = None

    @property
    def changes_rows(self) -> bool:
        """Rows appear or go without row events: TRUNCATE, DROP and EXCHANGE (and CONVERT
        PARTITION TO TABLE, a DROP that keeps the rows elsewhere; CONVERT TABLE TO PARTITION,
        an EXCHANGE). REORGANIZE, COALESCE, REBUILD, ADD and the rest move rows between
        partitions or leave them: the statement fails where a row would not fit."""
        return self.action in ("TRUNCATE", "DROP", "EXCHANGE", "CONVERT")


def partition_change(statement: str, default_db: str) -> PartitionChange | None:
    """The partition operation an ALTER TABLE statement is, or None (another statement)."""
    match = _PARTITION.match(statement.strip())
    if not match:
        return None
    name, action, noun, rest = match.groups()
    action = action.upper()
    if noun.upper() == "TABLE" and action != "CONVERT":
        return None
    table = _split_name(name, default_db)
    other = _WITH_TABLE.search(rest)
    head = re.split(r"\b(?:WITH|INTO|TO|VALUES)\b", rest, maxsplit=1, flags=re.I)[0]
    partitions = tuple(n for q, p in re.findall(r"`((?:[^`]|``)+)`|([\w$]+)", head)
                       for n in [q or p] if n)
    if action == "CONVERT" and noun.upper() == "TABLE":  # CONVERT TABLE x TO PARTITION p
        return PartitionChange(table, "EXCHANGE", (), _split_name(partitions[0], default_db)
                               if partitions else None)
    if action == "TRUNCATE" and partitions[:1] == ("ALL",):
        partitions = ("ALL",)
    return PartitionChange(table, action, partitions,
                           _split_name(other.group(1), default_db) if other else None)



# -- ALTER TABLE that changes stored values without row events ---------------------------------
_ALTER_IGNORE = re.compile(r"ALTER\s+(?:ONLINE\s+)?IGNORE\s+TABLE\b", re.I)
_ALTER_TABLE = re.compile(rf"{_ALTER_TABLE_WORDS}\b", re.I)
_UNREAD_FILLS = re.compile(r"\b(DEFAULT|NOT\s+NULL|AUTO_INCREMENT|SERIAL|GENERATED|AS\s*\(|"
                           r"MODIFY|CHANGE|CONVERT)\b", re.I)
_TEMPORAL = ("datetime", "timestamp", "time")


@dataclass(frozen=True)
class Rewrite:
    """Values an ALTER TABLE changes without row events, and why; `added`: those of a column it
    adds (a table whose new columns stay out of silver need not care)."""

    why: str
    added: bool = False


def value_rewrites(statement: str, before: dict, strict: bool) -> list[Rewrite]:
    """Why an ALTER TABLE changes values the table holds without writing row events ([] if it
    does not): a column added with a value for the rows already there (a DEFAULT, NOT NULL's
    implicit default, AUTO_INCREMENT, a generated column), a column converted under a sql_mode
    that is not strict (values that do not fit are cut instead of the statement failing), or
    to fewer fractional seconds or to CHAR (rounded, trailing spaces gone, strict or not), ALTER
    IGNORE (rows of duplicate keys deleted). `before`: the table's columns (lower-case name ->
    schema.Column) before the statement. A statement sqlglot cannot read counts when it holds a
    word that could do any of these."""
    text = statement.strip()
    if not _ALTER_TABLE.match(text):
        return []
    if _ALTER_IGNORE.match(text):
        return [Rewrite("ALTER IGNORE TABLE deletes the rows of duplicate keys")]
    tree = _parse(text)
    if not isinstance(tree, exp.Alter):
        found = _UNREAD_FILLS.search(text)
        return [Rewrite(f"an ALTER TABLE with {found.group(1).upper()} that sqlglot cannot "
                        f"read")] if found else []
    reasons = []
    for action in tree.args.get("actions") or []:
        if isinstance(action, exp.ColumnDef):
            why = _added_value(action)
            if why:
                reasons.append(Rewrite(f"column `{action.name}` added with {why} for the rows "
                                       f"already there", added=True))
        elif isinstance(action, exp.ModifyColumn):
            old = (action.args.get("rename_from") or action.this).name
            why = _converted(action.this, before.get(old.lower()), strict)
            if why:
                reasons.append(Rewrite(f"column `{old}` converted {why}"))
    return reasons


def _added_value(column: exp.ColumnDef) -> str:
    kinds = [c.args.get("kind") for c in column.args.get("constraints") or []]
    for kind in kinds:
        if isinstance(kind, exp.DefaultColumnConstraint) and not isinstance(kind.this, exp.Null):
            return "a DEFAULT"
        if isinstance(kind, exp.AutoIncrementColumnConstraint):
            return "AUTO_INCREMENT values"
        if isinstance(kind, exp.ComputedColumnConstraint):
            return "generated values"
    if any(isinstance(k, exp.NotNullColumnConstraint) and not k.args.get("allow_null")
           for k in kinds):
        return "NOT NULL's implicit default"
    return ""


def _converted(column: exp.ColumnDef, old, strict: bool) -> str:
    """Why converting a column to this definition may change a value it holds ("" if not)."""
    if not strict:
        return "under a sql_mode without STRICT_TRANS_TABLES (values that do not fit are cut)"
    kind = column.args.get("kind")
    new_type = kind.this.name.lower() if isinstance(kind, exp.DataType) else ""
    if new_type == "char" and (old is None or old.data_type != "char"):
        return "to CHAR (trailing spaces are removed)"
    if new_type in _TEMPORAL:
        params = kind.expressions
        fsp = int(params[0].name) if params and params[0].name.isdigit() else 0
        if old is None or old.data_type not in _TEMPORAL or fsp < (old.fsp or 0):
            return f"to {new_type.upper()}({fsp}) (fractional seconds rounded)"
    return ""
