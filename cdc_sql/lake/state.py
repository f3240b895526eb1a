"""The checkpoint: an append-only Delta table under `<target>/_state`; the newest entry wins.

Every entry is one of the dataclasses below, stored as (kind, name) -> JSON value; this module is
the only place that knows their JSON form (docs/architecture.md, "State"):
- `SplitEntry`   ("split", "<db.table>#<id>"): a snapshot split's bounds, status and watermark;
- `TableEntry`   ("table", "<silver name>"): the applied offset P and whether the snapshot is in;
- `CaptureEntry` ("capture", "binlog"): where the binlog reader resumes (a transaction boundary),
  the GTID position there, the server it was read from, and a part of a large transaction
  landed beyond it;
- `ResnapshotEntry` ("resnapshot", "<db.table>"): a source table read again while the pipeline
  runs (requested, then prepared: capture keeps its changes after `start`);
- `RunEntry`     ("run", "last"): the last run and its outcome;
- `MaintainEntry` ("maintain", "last"): when the target was last maintained;
- `OwnerEntry`   ("pipeline", "owner"): the pipeline this target belongs to;
- `FormatEntry`  ("format", "state"): the highest state format that wrote here (FORMAT).
Several entries written together land in one Delta commit: they change together or not at all.
Reading a value tolerates keys it does not know (a newer writer of the same format) and missing
ones (an older one). A checkpoint written by a newer format is refused, and so is a damaged one
(a value that is not JSON, a field of the wrong type, an unreadable Delta log or file), with a
StateError naming the entry and what to do: never a half-understood checkpoint.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import threading
import time
import types
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable

import pyarrow as pa

from cdc_sql.errors import StateError, is_transient
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.tables import LOG_TABLE
from cdc_sql.source.offsets import Position
from cdc_sql.source.splits import Split

# The checkpoint's format: raised when an entry's JSON changes so that an older cdc-sql would
# misread it. Readers refuse a higher one. 2: range re-reads (a split's `predicate`, a table's
# `ranged`), which format 1 would take for whole-table splits.
FORMAT = 2
STATE_SCHEMA = pa.schema([("kind", pa.string()), ("name", pa.string()), ("value", pa.string()),
                          ("seq", pa.int64()), ("run_id", pa.string()),
                          ("written_at", pa.timestamp("us", tz="UTC"))])


class Entry:
    """A checkpoint entry: `kind` is fixed per class, `name` comes from the value."""

    kind: ClassVar[str]

    @property
    def name(self) -> str:
        raise NotImplementedError

    def to_json(self) -> dict:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, name: str, value: dict):
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in value.items() if k in known})

    @classmethod
    def checked(cls, name: str, value: Any) -> "Entry":
        """from_json of a stored value, refusing one that is not this entry's (ValueError)."""
        if not isinstance(value, dict):
            raise ValueError(f"a JSON {type(value).__name__} where a record belongs")
        checks = _field_checks(cls)
        for key, item in value.items():
            kinds, items = checks.get(key, (None, None))
            if kinds is not None and (type(item) not in kinds or
                                      items is not None and not all(map(items, item))):
                raise ValueError(f"`{key}` is {json.dumps(item)[:40]}")
        try:
            return cls.from_json(name, value)
        except TypeError as exc:  # a required field missing
            raise ValueError(str(exc).split("__init__() ")[-1]) from None


@functools.cache
def _field_checks(cls: type) -> dict[str, tuple[frozenset, Callable | None]]:
    """Per field of an entry: the JSON types its value may have, and a check of each item of
    a list of typed items. Built once per class: a checkpoint holds thousands of entries, and
    checking one value is a set lookup."""
    hints = typing.get_type_hints(cls)
    return {f.name: _kinds(hints[f.name]) for f in dataclasses.fields(cls)}


def _kinds(hint: Any) -> tuple[frozenset, Callable | None]:
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    kinds: set = set()
    items = None
    for option in options:
        if typing.get_origin(option) is list or option is list:
            kinds.add(list)
            (item,) = typing.get_args(option) or (Any,)
            if item is not Any:
                items = _each(*_kinds(item))
        elif typing.get_origin(option) is dict or option is dict:
            kinds.add(dict)  # records of their own (held XA transactions): checked where read
        else:  # JSON numbers: a float field takes an integer; true is no number
            kinds.update({float: (int, float)}.get(option, (option,)))
    return frozenset(kinds), items


def _each(kinds: frozenset, items: Callable | None) -> Callable:
    """The check of one item of a list: its type, and its own items' if it is a list too."""
    return lambda v: type(v) in kinds and (items is None or all(map(items, v)))


@dataclass(frozen=True)
class SplitEntry(Entry):
    """One snapshot split: planned, then done with its rows' attempt and watermark.

    `watermark` is the offset text the split's rows stand at (empty while a MySQL GTID watermark
    waits to be resolved by the binlog reader); `read_end` a position after the read, past which
    the rows hold no change (history starts past every split's)."""

    kind: ClassVar[str] = "split"
    source_table: str
    split_id: int
    lower: list[Any] | None = None
    upper: list[Any] | None = None
    status: str = "planned"
    attempt: str | None = None
    rows: int | None = None
    watermark: str | None = None
    watermark_position: str | None = None
    watermark_gtid: str = ""
    watermark_exact: bool = True
    reader: str | None = None
    read_end: str | None = None
    server: str = ""  # the server whose binlog `watermark_position` is a place in
    predicate: str = ""  # a range re-read's rows instead of a key range (source/splits.py)
    read_at: str = ""  # when its rows were read (UTC, ISO 8601): a range re-read's removes' time

    @property
    def name(self) -> str:
        return f"{self.source_table}#{self.split_id}"

    @property
    def done(self) -> bool:
        return self.status == "done"

    @property
    def retired(self) -> bool:
        """A split of an earlier snapshot that a re-snapshot planned fewer splits than."""
        return self.status == "retired"

    @property
    def ready(self) -> bool:
        """Done, and its watermark known."""
        return self.done and bool(self.watermark)

    @property
    def split(self) -> Split:
        return Split.from_json(self.to_json())

    @classmethod
    def planned(cls, split: Split) -> "SplitEntry":
        return cls(**split.to_json())


@dataclass(frozen=True)
class TableEntry(Entry):
    """A silver table: applied offset P, the snapshot merged, our last Delta versions."""

    kind: ClassVar[str] = "table"
    table: str = ""
    applied: str = ""
    snapshot_merged: bool = False
    source_time: str | None = None
    key: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # the db.table names it reads
    cascade_parents: list[str] = field(default_factory=list)  # ... and whose cascades it applies
    silver_version: int | None = None
    history_version: int | None = None
    history_id: str = ""  # history's Delta table id (metaData.id) at history_version
    # A re-snapshot is under way: the offset after which the new silver reads binlog changes
    # (its splits' rows stand at watermarks past it); "" when none is.
    resnapshot: str = ""
    # The highest split id of a range re-read (`resnapshot --where`) merged into it: one at the
    # applied offset itself (nothing changed since) still counts as not merged (planner.py).
    ranged: int = -1

    @property
    def name(self) -> str:
        return self.table

    def to_json(self) -> dict:
        value = dataclasses.asdict(self)
        del value["table"]  # the entry's name
        return value

    @classmethod
    def from_json(cls, name: str, value: dict) -> "TableEntry":
        return super().from_json(name, {**value, "table": name})


@dataclass(frozen=True)
class CaptureEntry(Entry):
    """Where capture stands: `position`, a transaction boundary on the source, up to which bronze
    holds every change; `source_time` when the source was last known to be there (for lag)."""

    kind: ClassVar[str] = "capture"
    position: str = ""
    source_time: str | None = None
    gtid: str = ""          # the GTID position at `position` (MariaDB domain-server-seq,...)
    server: str = ""        # the server `position` is a place on (source/failover.py)
    # Source tables ([db, table]; ["", ""] for the statements table) whose bronze tables may
    # hold rows beyond `position`: a batch or a part of a large transaction was being written.
    landing: list[list[str]] = field(default_factory=list)
    # Prepared XA transactions held back until their XA COMMIT: XID -> {"start": the position
    # their events begin at, "gtid": the GTID of their prepared part}. Capture reads them again
    # from there when it resumes, and lands them at their commit (source/binlog.py).
    held: dict[str, dict] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return "binlog"

    @property
    def at(self) -> Position:
        return Position.parse(self.position)

    @property
    def offset(self) -> str:
        return self.at.offset.text


@dataclass(frozen=True)
class ResnapshotEntry(Entry):
    """A source table to read again (`cdc-sql resnapshot`, or a purged binlog): requested with
    `start` empty; prepared once its bronze tables are emptied and its new splits planned, with
    `start` the source position then. Capture drops the table's changes at or before `start`:
    the new splits' rows, read later, hold them."""

    kind: ClassVar[str] = "resnapshot"
    source_table: str = ""
    reason: str = ""
    requested_at: str = ""
    start: str = ""

    @property
    def name(self) -> str:
        return self.source_table

    @property
    def prepared(self) -> bool:
        return bool(self.start)


@dataclass(frozen=True)
class RunEntry(Entry):
    """The last run: what it did and how it ended (status, metrics)."""

    kind: ClassVar[str] = "run"
    run_id: str = ""
    started_at: str = ""
    outcome: str = "failed"
    seconds: float = 0.0
    snapshot_rows: int = 0
    captured_changes: int = 0
    merged_tables: list[str] = field(default_factory=list)
    seconds_snapshot: float = 0.0
    seconds_capture: float = 0.0
    seconds_merge: float = 0.0
    error: str | None = None

    @property
    def name(self) -> str:
        return "last"

    def to_json(self) -> dict:
        value = dataclasses.asdict(self)
        return value if self.error else {k: v for k, v in value.items() if k != "error"}


@dataclass(frozen=True)
class MaintainEntry(Entry):
    """The target's maintenance (ops/maintain.py): when it was last maintained, or, on a
    target never maintained, when a run first found no entry (`done` false). The next
    maintenance is counted from `at` (UTC, ISO 8601)."""

    kind: ClassVar[str] = "maintain"
    at: str = ""
    done: bool = True

    @property
    def name(self) -> str:
        return "last"


@dataclass(frozen=True)
class OwnerEntry(Entry):
    """The pipeline that writes this target."""

    kind: ClassVar[str] = "pipeline"
    pipeline: str = ""
    file: str = ""

    @property
    def name(self) -> str:
        return "owner"

    def to_json(self) -> dict:
        return {"name": self.pipeline, "file": self.file}

    @classmethod
    def from_json(cls, name: str, value: dict) -> "OwnerEntry":
        return cls(pipeline=value.get("name", ""), file=value.get("file", ""))


@dataclass(frozen=True)
class FormatEntry(Entry):
    """The state format of the newest cdc-sql that wrote this checkpoint (the highest wins)."""

    kind: ClassVar[str] = "format"
    version: int = FORMAT

    @property
    def name(self) -> str:
        return "state"


KINDS: dict[str, type[Entry]] = {c.kind: c for c in (SplitEntry, TableEntry, CaptureEntry,
                                                     ResnapshotEntry, RunEntry, MaintainEntry,
                                                     OwnerEntry, FormatEntry)}


@dataclass
class Checkpoint:
    """The newest entry of every (kind, name), typed."""

    entries: dict[tuple[str, str], Entry] = field(default_factory=dict)
    # split entries by source table (a thousand tables' windows must not scan every split)
    _splits: dict[str, dict[str, SplitEntry]] = field(default_factory=dict, repr=False,
                                                      compare=False)
    # ... and re-snapshot requests (every table's window asks whether one is pending)
    _resnapshots: dict[str, ResnapshotEntry] = field(default_factory=dict, repr=False,
                                                     compare=False)

    def __post_init__(self) -> None:
        for entry in list(self.entries.values()):
            self.add(entry)

    def add(self, entry: Entry) -> None:
        if isinstance(entry, FormatEntry) and entry.version < self.format:
            return  # an older cdc-sql wrote after a newer one: the newer format stays
        self.entries[(entry.kind, entry.name)] = entry
        if isinstance(entry, SplitEntry):
            self._splits.setdefault(entry.source_table, {})[entry.name] = entry
        elif isinstance(entry, ResnapshotEntry):
            self._resnapshots[entry.name] = entry

    @property
    def format(self) -> int:
        entry = self.entries.get(("format", "state"))
        return entry.version if entry is not None else FORMAT  # type: ignore[attr-defined]

    @property
    def capture(self) -> CaptureEntry | None:
        return self.entries.get(("capture", "binlog"))  # type: ignore[return-value]

    @property
    def owner(self) -> OwnerEntry | None:
        return self.entries.get(("pipeline", "owner"))  # type: ignore[return-value]

    @property
    def last_run(self) -> RunEntry | None:
        return self.entries.get(("run", "last"))  # type: ignore[return-value]

    @property
    def maintained(self) -> MaintainEntry | None:
        return self.entries.get(("maintain", "last"))  # type: ignore[return-value]

    def table(self, name: str) -> TableEntry | None:
        return self.entries.get(("table", name))  # type: ignore[return-value]

    def all_splits(self) -> list[SplitEntry]:
        """The splits of every table's current snapshot (retired ones left out)."""
        return [e for (kind, _), e in self.entries.items()  # type: ignore[misc]
                if kind == "split" and not e.retired]  # type: ignore[attr-defined]

    def resnapshots(self) -> list[ResnapshotEntry]:
        return list(self._resnapshots.values())

    def next_split_id(self, source_table: str) -> int:
        """An id no split of the table ever had (retired ones too): a range re-read's."""
        return max((s.split_id for s in self._splits.get(source_table, {}).values()),
                   default=-1) + 1

    def splits(self, source_table: str) -> list[SplitEntry]:
        found = [s for s in self._splits.get(source_table, {}).values() if not s.retired]
        return sorted(found, key=lambda s: s.split_id)


def check_owner(checkpoint: Checkpoint, pipeline_name: str, root: str) -> None:
    """Refuse a target that another pipeline writes: their checkpoints would overwrite
    each other's offsets and splits."""
    owner = checkpoint.owner
    if owner and owner.pipeline != pipeline_name:
        raise StateError(f"target {root} belongs to pipeline `{owner.pipeline}` (from "
                         f"{owner.file or 'an unknown file'}), and this is pipeline "
                         f"`{pipeline_name}`: two pipelines on one target would overwrite each "
                         f"other's state. Give each pipeline its own target.path (or, if this "
                         f"is the same pipeline renamed, use its old name)")


DAMAGED = ("restore it to its last good version (Delta RESTORE ... TO VERSION AS OF, in Spark "
           "SQL or delta-rs), or delete the target to start over (every table is read again)")


def decode_rows(rows: Iterable[dict], path: str = "_state/checkpoint") -> Checkpoint:
    """State rows (kind, name, value, seq) to a checkpoint; entries of unknown kinds are kept
    out (a newer cdc-sql's of the same format). A damaged entry is a StateError naming it."""
    rows = list(rows)
    for row in rows:
        if not isinstance(row.get("seq"), int) or not isinstance(row.get("kind"), str) or \
                not isinstance(row.get("name"), str):
            raise StateError(f"the checkpoint {path} is damaged (a row without its kind, name "
                             f"or sequence number): {DAMAGED}")
    checkpoint = Checkpoint()
    for row in sorted(rows, key=lambda r: r["seq"]):
        kind = KINDS.get(row["kind"])
        if kind is None:
            continue
        try:
            checkpoint.add(kind.checked(row["name"], json.loads(row["value"] or "")))
        except ValueError as exc:  # json.JSONDecodeError is one
            raise StateError(f"the checkpoint {path} holds a damaged `{row['kind']}` entry "
                             f"`{row['name'][:80]}` ({str(exc).splitlines()[0][:120]}): "
                             f"{DAMAGED}") from None
    if checkpoint.format > FORMAT:
        raise StateError(f"the checkpoint {path} was written by a newer cdc-sql (state format "
                         f"{checkpoint.format}; this one reads format {FORMAT} and older): run "
                         f"that version or a later one")
    return checkpoint


class State:
    """The checkpoint table of one lake: load it, append entries to it, compact it."""

    def __init__(self, lake: Lake):
        self.lake = lake
        self.path = lake.state_path
        self.run_id = uuid.uuid4().hex[:12]
        self._last_seq = 0
        self._lock = threading.Lock()
        self._format_written = False
        # The (kind, name) the log holds, and how many of its rows a newer one supersedes:
        # known once loaded (None before), kept up to date by every write.
        self._names: set[tuple[str, str]] | None = None
        self.superseded = 0
        self._created = False

    def load(self) -> Checkpoint:
        if not self.lake.tables.exists(self.path):
            with self._lock:
                self._names, self.superseded = set(), 0
            return Checkpoint()
        try:  # every column: compact() then reads no file again
            rows = self.lake.tables.read_arrow(self.path, each_file_once=True)
        except Exception as exc:  # noqa: BLE001 - delta-rs, Arrow, the engine: all say "cannot"
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            error = StateError(f"the checkpoint {self.path} cannot be read ({text[:200]}): if "
                               f"its storage is reachable, {DAMAGED}")
            error.transient = is_transient(None, text)
            raise error from None
        listed = rows.select(["kind", "name", "value", "seq"]).to_pylist()
        checkpoint = decode_rows(listed, self.path)
        with self._lock:
            self._names = {(row["kind"], row["name"]) for row in listed}
            self.superseded = len(listed) - len(self._names)
        return checkpoint

    def write(self, *entries: Entry) -> None:
        """Append entries in one commit; `seq` orders them across runs and threads."""
        if not entries:
            return
        now = dt.datetime.now(dt.timezone.utc)
        rows = []
        with self._lock:  # snapshot readers report splits from several threads
            if not self._format_written:  # with this run's first commit
                entries, self._format_written = (FormatEntry(), *entries), True
            for entry in entries:
                if self._names is not None:
                    self.superseded += (entry.kind, entry.name) in self._names
                    self._names.add((entry.kind, entry.name))
                self._last_seq = max(time.time_ns(), self._last_seq + 1)
                rows.append({"kind": entry.kind, "name": entry.name,
                             "value": json.dumps(entry.to_json(), sort_keys=True),
                             "seq": self._last_seq, "run_id": self.run_id, "written_at": now})
        table = pa.Table.from_pylist(rows, schema=STATE_SCHEMA)
        if not self._created:  # a table committed to for days: a short log (tables.LOG_TABLE)
            self.lake.tables.create_arrow_table(self.path, STATE_SCHEMA, LOG_TABLE)
            self._created = True
        self.lake.tables.append_arrow(self.path, table.to_batches(), STATE_SCHEMA)

    def compact_if_due(self) -> int:
        """Compact the log once COMPACT_AT of its rows are superseded (`compaction_due`):
        loads read every row, and each commit adds a file. Called by a run where no other
        thread of it writes state (the capture writer after a commit, the runner between
        passes), so a run following the binlog for days commits as fast as on its first
        day. Returns the entries dropped."""
        if self._names is None or not compaction_due(self.superseded):
            return 0
        return self.compact()

    def compact(self) -> int:
        """Rewrite the log to its newest entry per (kind, name), in one commit; returns the
        entries dropped. Loads read the whole log, so this keeps them fast (maintain, and
        runs: compact_if_due). Only the entries read are replaced (`seq` up to the last
        read): an entry another command appends meanwhile (`cdc-sql resnapshot` takes no
        lease) stays. No entry changes: a kill before or after its one commit is the same."""
        if not self.lake.tables.exists(self.path):
            return 0
        table = self.lake.tables.read_arrow(self.path, each_file_once=True)
        newest: dict[tuple[str, str], dict] = {}
        for row in sorted(table.to_pylist(), key=lambda r: r["seq"]):
            newest[(row["kind"], row["name"])] = row
        kept = pa.Table.from_pylist(sorted(newest.values(), key=lambda r: r["seq"]),
                                    schema=STATE_SCHEMA)
        last = max(table.column("seq").to_pylist(), default=0)
        self.lake.tables.replace_rows(self.path, kept, STATE_SCHEMA, f"seq <= {int(last)}")
        with self._lock:
            self._names, self.superseded = set(newest), 0
        return table.num_rows - kept.num_rows


# Superseded state rows at which a run compacts the log: each load reads the rows, and a
# commit costs more the more files the table has (docs/performance.md, "Commits that stay
# cheap through a long run"); a compaction reads and writes the log once.
COMPACT_AT = 400


def compaction_due(superseded: int) -> bool:
    """Whether a log with this many superseded rows is compacted now."""
    return superseded >= COMPACT_AT
