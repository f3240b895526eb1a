"""A table's partitions, and which rows a partition holds.

`ALTER TABLE ... TRUNCATE PARTITION` and `DROP PARTITION` remove rows without a row event: the
binlog has the statement only. Where the table is partitioned by one column (RANGE, RANGE
COLUMNS, LIST or LIST COLUMNS over a plain column) and its layout at that statement is known,
the rows it removed are exactly those whose column falls in the partitions' ranges or lists,
and silver can remove them too (lake/silver/execute.py). Anything else (HASH, KEY, an expression such as
YEAR(d), several columns, a DEFAULT partition) gives no condition: the table is read again.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_VALUE = re.compile(r"\s*(?:'((?:[^'\\]|\\.|'')*)'|(NULL)|(-?\d+)|([^,]+?))\s*(?:,|$)", re.I)


@dataclass(frozen=True)
class Partitioning:
    """How a table is partitioned: the method, the one column it partitions by (None for an
    expression or several columns), and its partitions (name, description) in order."""

    method: str
    column: str | None
    partitions: tuple[tuple[str, str], ...]

    def rows_of(self, names: tuple[str, ...]) -> list[list[tuple]] | None:
        """The rows of the named partitions, as conditions for lake/tables.py: a list of
        alternatives, each a list of (column, operator, value) that all hold. None where no
        condition can say it."""
        known = dict(self.partitions)
        if self.column is None or not names or any(n not in known for n in names):
            return None
        method = self.method.upper()
        groups: list[list[tuple]] = []
        for name in names:
            if method.startswith("RANGE"):
                found = self._range(name)
            elif method.startswith("LIST"):
                found = self._list(known[name])
            else:
                return None
            if found is None:
                return None
            groups += found
        return groups

    def _range(self, name: str) -> list[list[tuple]] | None:
        order = [n for n, _ in self.partitions]
        at = order.index(name)
        upper = _values(self.partitions[at][1])
        lower = _values(self.partitions[at - 1][1]) if at else None
        if upper is None or len(upper) != 1 or lower is not None and len(lower) != 1:
            return None
        where = []
        if lower is not None:
            where.append((self.column, ">=", lower[0]))
        if upper[0] != "MAXVALUE":
            where.append((self.column, "<", upper[0]))
        if lower is not None and lower[0] == "MAXVALUE":
            return None
        groups = [where]
        if not at:  # NULL sorts below every value: the first range holds it
            groups.append([(self.column, "IS", None)])
        return groups

    def _list(self, description: str) -> list[list[tuple]] | None:
        values = _values(description)
        if values is None or "MAXVALUE" in values or "DEFAULT" in values:
            return None
        present = [v for v in values if v is not None]
        groups = [[(self.column, "IN", present)]] if present else []
        if len(present) < len(values):
            groups.append([(self.column, "IS", None)])
        return groups


def _values(description: str | None) -> list | None:
    """A partition description's values: integers, strings, None for NULL, "MAXVALUE"; None
    when it holds anything else (a tuple of several columns, an expression)."""
    text = (description or "").strip()
    if not text or text.startswith("("):
        return None
    if text.upper() in ("MAXVALUE", "DEFAULT"):
        return [text.upper()]
    out, pos = [], 0
    while pos < len(text):
        match = _VALUE.match(text, pos)
        if not match or match.end() == pos:
            return None
        quoted, null, number, other = match.groups()
        if other is not None:
            return None
        out.append(None if null else int(number) if number is not None else
                   quoted.replace("''", "'").replace("\\'", "'"))
        pos = match.end()
    return out


# What source/schema.py reads of information_schema.PARTITIONS for `partitioning`.
PARTITION_COLUMNS = ("PARTITION_NAME, PARTITION_METHOD, PARTITION_EXPRESSION, "
                     "PARTITION_DESCRIPTION, PARTITION_ORDINAL_POSITION")


def partitioning(rows: list | tuple) -> Partitioning | None:
    """A table's partitions from its rows of information_schema.PARTITIONS (PARTITION_COLUMNS,
    one row per partition, in order); None without any. Pure."""
    if not rows:
        return None
    expression = str(rows[0][2] or "").strip()
    column = re.fullmatch(r"`((?:[^`]|``)+)`", expression)
    return Partitioning(str(rows[0][1]), column.group(1).replace("``", "`") if column else None,
                        tuple((str(n), str(d) if d is not None else "") for n, _, _, d, _ in rows))
