"""Foreign-key cascades: the child rows InnoDB changes without a binlog event. Pure functions.

InnoDB carries out `ON DELETE CASCADE`, `ON UPDATE CASCADE` and `SET NULL` inside the engine:
the binlog holds the parent's change, never the child rows it changed. cdc-sql works them out
and gives the child's silver (and history) each of them as a change row at the parent change's
offset, merged with the child's own changes by the usual rule, the last candidate per key by
offset (docs/architecture.md, "Cascades"):

- a parent change is a delete of its key, or a change of its key (the binlog reader turns an
  UPDATE of a key into a delete of the old key and an insert of the new one at one offset);
- the child rows it reaches are those whose foreign-key columns equal the old key *just before*
  that offset: the child's rows as silver held them when the window began (or the snapshot rows
  at their watermarks, in a first batch), carried forward through the child's own changes and
  the cascades already worked out, in offset order;
- a child row changed after the cascade already carries the cascaded value in its image, so its
  own change wins, as it must; a snapshot row read after the cascade wins over it the same way.

Cascades set off by cascades (orders deleted with their customer delete their items) follow:
the keys a cascade deleted or changed (`Outcome.moves`) are parent changes for the tables the
child cascades into, which merge in the same group, after it (`chains`).

Not applied (and `validate` says so, naming the constraint): `SET DEFAULT` (InnoDB rejects it),
a parent that is not captured, a foreign key that references other columns than the parent's
key, a child silver table that is a projection or a shard union (its rows are not the source's).
Changes made with `foreign_key_checks=0` cascade nothing in InnoDB: capture marks their rows
events, and they are left out here.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Sequence

ACTIONS = ("CASCADE", "SET NULL")


@dataclass(frozen=True)
class ForeignKey:
    """One foreign key as information_schema describes it."""

    name: str
    child: str                     # db.table
    columns: tuple[str, ...]       # the child's columns, in the constraint's order
    parent: str                    # db.table
    referenced: tuple[str, ...]    # the parent's columns they reference, in the same order
    on_update: str                 # CASCADE, SET NULL, SET DEFAULT, RESTRICT, NO ACTION
    on_delete: str
    folded: tuple[bool, ...] = ()  # per column: compared case- and trailing-space-insensitively
    parent_table: tuple[str, str] = ("", "")  # (db, table): names may hold dots

    @property
    def cascading(self) -> bool:
        return self.on_update in (*ACTIONS, "SET DEFAULT") or \
            self.on_delete in (*ACTIONS, "SET DEFAULT")

    def rules(self) -> str:
        return ", ".join(f"ON {what} {rule}" for what, rule in (("UPDATE", self.on_update),
                                                                   ("DELETE", self.on_delete))
                         if rule in (*ACTIONS, "SET DEFAULT"))

    def aligned(self, parent_key: Sequence[str]) -> "ForeignKey":
        """The same key with its columns in the order of the parent's key."""
        order = [self.referenced.index(k) for k in parent_key]
        folded = self.folded or (False,) * len(self.columns)
        return replace(self, columns=tuple(self.columns[i] for i in order),
                       referenced=tuple(parent_key), folded=tuple(folded[i] for i in order))


def unapplied(fk: ForeignKey, parent_key: Sequence[str] | None, child_as_is: bool) -> str | None:
    """Why the cascades of `fk` cannot reach the child's silver, or None when they can.
    `parent_key`: the parent's key when the pipeline captures it; `child_as_is`: the child's
    silver holds its source rows unchanged (no projection, no shards)."""
    if fk.on_update == "SET DEFAULT" or fk.on_delete == "SET DEFAULT":
        return "InnoDB does not carry out SET DEFAULT"
    if parent_key is None:
        return f"the pipeline does not capture {fk.parent}"
    if sorted(fk.referenced) != sorted(parent_key):
        return (f"it references ({', '.join(fk.referenced)}), not the key of {fk.parent} "
                f"({', '.join(parent_key)})")
    if not child_as_is:
        return f"silver of {fk.child} is a projection or a union of shards, not its source rows"
    return None


def assign(fks: Iterable[ForeignKey], captured: dict[str, tuple[str, ...]],
           as_is: set[str]) -> tuple[dict[str, tuple[ForeignKey, ...]], list[str]]:
    """The cascading foreign keys applied to each captured child (aligned with the parent's
    key), and a warning for each one that is not, or only in part. `captured`: every captured
    source table (db.table) and its key; `as_is`: those whose silver is their rows unchanged."""
    fks = [fk for fk in fks if fk.cascading and fk.child in captured]
    applied: dict[str, list[ForeignKey]] = {}
    warnings, missed = [], set()  # missed: tables some cascades into are not applied
    for fk in fks:
        why = unapplied(fk, captured.get(fk.parent), fk.child in as_is)
        if why:
            missed.add(fk.child)
            warnings.append(f"{_label(fk)}: InnoDB applies it without a binlog event, and "
                            f"cdc-sql cannot apply it to silver: {why}. Silver of {fk.child} "
                            f"keeps the rows it changes: run `cdc-sql verify` on that table, or "
                            f"change child rows explicitly (docs/types.md, Limits)")
        else:
            applied.setdefault(fk.child, []).append(fk.aligned(captured[fk.parent]))
    for fk in (f for found in applied.values() for f in found):
        if fk.parent in missed:
            warnings.append(f"{_label(fk)}: applied to silver, except where a cascade into "
                            f"{fk.parent} that silver cannot apply sets it off: run "
                            f"`cdc-sql verify` on {fk.child} after such changes")
    return {child: tuple(found) for child, found in applied.items()}, warnings


def _label(fk: ForeignKey) -> str:
    return f"foreign key `{fk.name}` of {fk.child} ({fk.rules()} from {fk.parent})"


def chains(applied: dict[str, tuple[ForeignKey, ...]]) -> list[list[str]]:
    """Tables whose cascades set off cascades, grouped with the tables they cascade into, each
    group parents first: a group merges its windows together, in that order, each table's
    cascade moves passed on to its children (`applied`: per child, its applied foreign keys).
    Tables on a cycle of foreign keys are left out."""
    edges = {(fk.parent, child) for child, fks in applied.items() for fk in fks
             if fk.parent in applied and fk.parent != child}
    nodes = sorted({n for edge in edges for n in edge})
    group = {n: n for n in nodes}

    def root(n: str) -> str:
        while group[n] != n:
            n = group[n]
        return n

    for parent, child in edges:
        group[root(child)] = root(parent)
    order, incoming = [], {n: {p for p, c in edges if c == n} for n in nodes}
    ready = sorted(n for n in nodes if not incoming[n])
    while ready:
        n = ready.pop(0)
        order.append(n)
        for c in sorted(c for p, c in edges if p == n):
            incoming[c].discard(n)
            if not incoming[c]:
                ready.append(c)
    found: dict[str, list[str]] = {}
    for n in order:
        found.setdefault(root(n), []).append(n)
    return [members for members in found.values() if len(members) > 1]


@dataclass(frozen=True)
class ParentChange:
    """A delete of a parent key (`new` None) or a change of it, at `offset`."""

    offset: str
    parent: str
    old: tuple
    new: tuple | None
    ts: object = None  # the commit time of the change that set it off


def parent_changes(parent: str, rows: Iterable[tuple[str, str, tuple]]) -> list[ParentChange]:
    """The deletes and key changes among a parent's change rows (offset, op, key): a key change
    is the delete of the old key and the insert of the new one at the same offset."""
    by_offset: dict[str, dict[str, tuple]] = {}
    for offset, op, key in rows:
        if op in ("d", "c"):
            by_offset.setdefault(offset, {})[op] = key
    return [ParentChange(offset, parent, ops["d"], ops.get("c"))
            for offset, ops in sorted(by_offset.items()) if "d" in ops]


@dataclass(frozen=True)
class Version:
    """A child row as of `offset`: its image, or its removal (`deleted`, image = the last one)."""

    offset: str
    image: dict
    deleted: bool = False


@dataclass
class Outcome:
    """What parent changes cascaded into: the child's change rows (offset, op c/u/d, image), and
    its keys deleted or changed (as parent changes, for the tables the child cascades into)."""

    rows: list[tuple[str, str, dict]]
    moves: list[tuple[str, tuple, tuple | None]]  # offset, old key, new key (None: deleted)

    def as_parent(self, child: str) -> list[ParentChange]:
        return [ParentChange(offset, child, old, new) for offset, old, new in self.moves]


def cascade(fks: Sequence[ForeignKey], key: Sequence[str], versions: Iterable[Version],
            changes: Iterable[ParentChange], table: str = "") -> Outcome:
    """The child change rows the parent changes cascade into, given the child's own versions
    (silver's rows or snapshot rows, and its binlog changes). `fks`: the child's foreign keys,
    each aligned with its parent's key; `table`: the child's own name, for foreign keys that
    reference it (a row's delete cascades through its subtree, depth first, as InnoDB does). A
    parent change and a child version at the same offset: the change comes first (a snapshot
    row at its watermark holds it). Parent changes at one offset apply in the order given."""
    timeline = sorted([(c.offset, 0, c) for c in changes] + [(v.offset, 1, v) for v in versions],
                      key=lambda item: item[:2])
    rows = _Rows(fks, key)
    out: list[tuple[str, str, dict]] = []
    moves: list[tuple[str, tuple, tuple | None]] = []
    n = 0
    while n < len(timeline):
        offset, kind, item = timeline[n]
        if kind == 1:
            row_key = rows.key_of(item.image)
            rows.pop(row_key)
            if not item.deleted:
                rows.put(row_key, item.image)
            n += 1
            continue
        before: dict[tuple, dict | None] = {}
        while n < len(timeline) and timeline[n][:2] == (offset, 0):
            _apply(timeline[n][2], rows, before, moves, table)
            n += 1
        for row_key, old in before.items():
            new = rows.get(row_key)
            if old is None and new is not None:
                out.append((offset, "c", new))
            elif old is not None and new is None:
                out.append((offset, "d", old))
            elif old != new:
                out.append((offset, "u", new))
    return Outcome(out, moves)


class _Rows:
    """The child rows as of a point in the timeline, indexed by each foreign key's values."""

    def __init__(self, fks: Sequence[ForeignKey], key: Sequence[str]):
        self.fks, self.key = fks, tuple(key)
        self.images: dict[tuple, dict] = {}
        self.index: list[dict[tuple, set[tuple]]] = [{} for _ in fks]

    def key_of(self, image: dict) -> tuple:
        return tuple(image.get(k) for k in self.key)

    def get(self, row_key: tuple) -> dict | None:
        return self.images.get(row_key)

    def put(self, row_key: tuple, image: dict) -> None:
        self.images[row_key] = image
        for n, fk in enumerate(self.fks):
            values = _folded(tuple(image.get(c) for c in fk.columns), fk.folded)
            if values is not None:
                self.index[n].setdefault(values, set()).add(row_key)

    def pop(self, row_key: tuple) -> dict | None:
        image = self.images.pop(row_key, None)
        if image is not None:
            for n, fk in enumerate(self.fks):
                values = _folded(tuple(image.get(c) for c in fk.columns), fk.folded)
                if values is not None:
                    self.index[n].get(values, set()).discard(row_key)
        return image

    def reached(self, n: int, parent_key: tuple) -> list[tuple]:
        """The rows whose values of foreign key `n` reference `parent_key`."""
        return sorted(self.index[n].get(_folded(parent_key, self.fks[n].folded), ()), key=repr)


def _apply(change: ParentChange, rows: _Rows, before: dict[tuple, dict | None],
           moves: list[tuple[str, tuple, tuple | None]], table: str) -> None:
    for n, fk in enumerate(rows.fks):
        if fk.parent != change.parent:
            continue
        rule = fk.on_delete if change.new is None else fk.on_update
        if rule not in ACTIONS:
            continue
        for row_key in rows.reached(n, change.old):
            image = rows.pop(row_key)
            if image is None:
                continue  # gone already, down a self reference
            before.setdefault(row_key, image)
            new_key = None
            if rule != "CASCADE" or change.new is not None:
                values = change.new if rule == "CASCADE" else (None,) * len(fk.columns)
                image = {**image, **dict(zip(fk.columns, values))}
                new_key = rows.key_of(image)
                before.setdefault(new_key, rows.get(new_key))
                rows.put(new_key, image)
                if new_key == row_key:
                    continue
            moves.append((change.offset, row_key, new_key))
            if table and any(f.parent == table for f in rows.fks):
                _apply(ParentChange(change.offset, table, row_key, new_key), rows, before,
                       moves, table)


def _folded(values: tuple, folded: tuple[bool, ...]) -> tuple | None:
    """Foreign-key values as they compare (None: a NULL among them references nothing): a
    case-insensitive collation ignores case and trailing spaces."""
    if any(v is None for v in values):
        return None
    return tuple(v.rstrip(" ").casefold() if folded and folded[n] and isinstance(v, str) else v
                 for n, v in enumerate(values))
