"""A local Delta table of few commits read from its log's files and committed to directly.

Opening a table with delta-rs costs 2 ms, and a commit of files already written through it
(`create_write_transaction`) 3.7 ms, where reading a small table's one commit file takes
0.06 ms and writing one 0.24 ms: a run over thousands of small tables (a schema per tenant)
spent most of its merge there (docs/performance.md, "A small table's log read and written
here"). So a local table whose log is at most MOST_COMMITS commit files from version 0, with
no checkpoint, and read by the rules this module knows (no partitions, deletion vectors,
column mapping or writer feature delta-rs does not write itself), is read here: its
protocol, metadata, schema, files and their statistics, its commits' information; and an
append or a rewrite of files already in its directory is committed here, as the next
version's commit file made only if absent (a link: the commit of a writer that took the
version meanwhile stays, and this one is not made). Anything else is delta-rs's, as it was:
`read` says None.
"""
from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa

# A log of more commit files, or with a checkpoint, is opened by delta-rs: replaying 100 commit
# files here takes 3-5 ms where delta-rs takes 45-65 ms; past delta-rs's checkpoint interval
# (CHECKPOINT_INTERVAL) a table has a checkpoint, which this module does not read.
MOST_COMMITS = 100
READ_FEATURES = frozenset({"timestampNtz"})
WRITES_FEATURES = {"timestampNtz", "invariants", "appendOnly",  # delta-rs writes these,
                   "changeDataFeed"}  # its MERGE, UPDATE and DELETE with their _change_data
CHECKPOINT_INTERVAL = 100  # delta-rs's default `delta.checkpointInterval`
_COMMIT = re.compile(r"^(\d{20})\.json$")
# beside the commit files: a writer's temporary file (ours, delta-rs's), a version's checksum
_BESIDE = re.compile(r"^(\.|_commit_.*\.tmp$|\d{20}\.crc$)")
ENGINE = "cdc-sql"


def commit_file(path: str, version: int) -> str:
    return os.path.join(path, "_delta_log", f"{version:020d}.json")


def identity(file: str) -> tuple | None:
    """What tells a commit file from another written later under the same name (a table
    removed and made again): its inode, size, times and first bytes (a commit's first action
    holds its time, its later ones the random names of its files). None: no such file."""
    try:
        with open(file, "rb") as commit:
            found = os.fstat(commit.fileno())
            return found.st_ino, found.st_size, found.st_mtime_ns, commit.read(4096)
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class Snapshot:
    """A table at `version`, replayed from its commit files: `files` its add actions by path
    (as JSON objects), `seen` the identity of the last commit file."""

    path: str
    version: int
    protocol: dict
    metadata: dict
    files: dict[str, dict]
    seen: tuple
    _schema: list = field(default_factory=list, compare=False)  # (the Arrow schema, once)

    @property
    def configuration(self) -> dict[str, str]:
        return dict(self.metadata.get("configuration") or {})

    @property
    def table_id(self) -> str:
        return str(self.metadata["id"])

    def schema(self) -> pa.Schema:
        if not self._schema:
            from deltalake import Schema

            self._schema.append(pa.schema(Schema.from_json(self.metadata["schemaString"])
                                          .to_arrow()))
        return self._schema[0]

    def writable(self) -> bool:
        """Whether this module may commit files written here to the table: writer version 2,
        or 7 with no feature outside WRITES_FEATURES; nothing a writer must check or compute
        (constraints, invariants, generated columns: delta-rs's writer does); not
        append-only (a rewrite removes files)."""
        protocol, configuration = self.protocol, self.configuration
        schema = self.metadata.get("schemaString") or ""
        return (protocol.get("minWriterVersion") == 2 or (
            protocol.get("minWriterVersion") == 7 and
            set(protocol.get("writerFeatures") or ()) <= WRITES_FEATURES)) and \
            configuration.get("delta.appendOnly") != "true" and \
            not any(k.startswith("delta.constraints.") for k in configuration) and \
            "delta.invariants" not in schema and "delta.generationExpression" not in schema

    def file_list(self, column: str | None) -> list[tuple] | None:
        """(path, bytes, rows, min and max of `column`) of each data file, as delta-rs's
        flattened add actions give them (None where the statistics have no bound); None when
        the column's bounds are of a type read here only approximately (delta-rs's then)."""
        kind = _bound_kind(self.schema(), column)
        if kind is False:
            return None
        found = []
        for name, add in self.files.items():
            try:
                stats = json.loads(add.get("stats") or "{}")
            except ValueError:
                return None
            if not isinstance(stats, dict):
                return None
            low, high = (None, None) if kind is None else \
                ((stats.get("minValues") or {}).get(column),
                 (stats.get("maxValues") or {}).get(column))
            if any(v is not None and not _is(v, kind) for v in (low, high)):
                return None
            found.append((name, add.get("size"), stats.get("numRecords"), low, high))
        return found


def _bound_kind(schema: pa.Schema, column: str | None):
    """The Python type a bound of `column` is read as (int or str, exact in JSON), None for
    no column, False for a type whose bounds delta-rs must read."""
    if column is None:
        return None
    if column not in schema.names:
        return False
    type_ = schema.field(column).type
    if pa.types.is_integer(type_):
        return int
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return str
    return False


def _is(value, kind) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


def read(path: str, since: Snapshot | None = None) -> Snapshot | None:
    """The table at `path` at its latest version: `since` brought up by the commits after it
    (still the same table), else replayed from version 0; None when the table is not one
    this module reads (see the module's text), or not there."""
    if since is not None:
        if identity(commit_file(path, since.version)) == since.seen:
            return _replayed(since, path)
    names = _log_names(path)
    if names is None:
        return None
    commits = [m for m in map(_COMMIT.match, names) if m]
    versions = sorted(int(m.group(1)) for m in commits)
    if not versions or versions != list(range(len(versions))) or len(versions) > MOST_COMMITS \
            or any(not _BESIDE.match(name) for name in set(names) - {m.string for m in commits}):
        return None  # a checkpoint, or a file of a kind not known here
    start = Snapshot(path, -1, {}, {}, {}, ())
    return _replayed(start, path)


def _log_names(path: str) -> list[str] | None:
    try:
        return os.listdir(os.path.join(path, "_delta_log"))
    except (FileNotFoundError, NotADirectoryError):
        return None


def _replayed(snapshot: Snapshot, path: str) -> Snapshot | None:
    """`snapshot` with the commits after it applied, up to the latest."""
    version, protocol, metadata = snapshot.version, snapshot.protocol, snapshot.metadata
    files, seen = None, snapshot.seen
    while True:
        file = commit_file(path, version + 1)
        try:
            with open(file, "rb") as commit:
                text = commit.read()
                found = os.fstat(commit.fileno())
        except FileNotFoundError:
            break
        if files is None:
            files = dict(snapshot.files)
        try:
            for action in map(json.loads, filter(bytes.strip, text.splitlines())):
                if "add" in action:
                    add = action["add"]
                    if add.get("deletionVector") or add.get("partitionValues") or \
                            "://" in add["path"] or add["path"].startswith("/"):
                        return None  # rows not the file's, or a file outside the table
                    files[unquote(add["path"])] = add
                elif "remove" in action:
                    files.pop(unquote(action["remove"]["path"]), None)
                elif "metaData" in action:
                    metadata = action["metaData"]
                elif "protocol" in action:
                    protocol = action["protocol"]
        except (ValueError, TypeError, KeyError, AttributeError):
            return None  # not a commit as this module reads one: delta-rs's to read or refuse
        version += 1
        seen = found.st_ino, found.st_size, found.st_mtime_ns, text[:4096]
    if files is None:
        return snapshot if version >= 0 else None
    if not _readable(protocol, metadata):
        return None
    kept = snapshot._schema if metadata is snapshot.metadata else []
    return Snapshot(path, version, protocol, metadata, files, seen, kept)


def _readable(protocol: dict, metadata: dict) -> bool:
    """Whether a table's rows are its files' as this module reads them."""
    return bool(protocol) and bool(metadata) and rows_are_files(
        metadata.get("partitionColumns"), metadata.get("configuration") or {},
        protocol.get("minReaderVersion", 1), protocol.get("readerFeatures")) and \
        protocol.get("minReaderVersion", 1) in (1, 3) and \
        set(protocol.get("writerFeatures") or ()) <= WRITES_FEATURES


def rows_are_files(partition_columns, configuration: dict, min_reader: int,
                   reader_features) -> bool:
    """Whether a table's rows are those of its files, read as they are: no partition values,
    deletion vectors or mapped column names (of its metadata and protocol). Pure."""
    return not partition_columns and \
        configuration.get("delta.columnMapping.mode", "none") == "none" and \
        set(reader_features or ()) <= READ_FEATURES and min_reader != 2


def open_rows_are_files(table) -> bool:
    """`rows_are_files` of an open delta-rs table, from its protocol and metadata."""
    protocol, metadata = table.protocol(), table.metadata()
    return rows_are_files(metadata.partition_columns, metadata.configuration,
                          protocol.min_reader_version, protocol.reader_features)


def history(snapshot: Snapshot, after_version: int) -> list[tuple[int, dict]] | None:
    """(version, commit information) of each commit after `after_version` up to the
    snapshot's, from their commit files; None when one is gone or has none."""
    found = []
    for version in range(max(after_version, -1) + 1, snapshot.version + 1):
        try:
            with open(commit_file(snapshot.path, version), "rb") as commit:
                lines = commit.read().splitlines()
        except FileNotFoundError:
            return None
        try:
            info = next((action["commitInfo"] for action in
                         (json.loads(line) for line in lines if b'"commitInfo"' in line)
                         if "commitInfo" in action), None)
        except ValueError:
            return None
        if not isinstance(info, dict):
            return None
        found.append((version, info))
    return found


def commit(snapshot: Snapshot, added: list, removed: list[str], mark: str | None) -> bool:
    """Commit `added` (delta-rs add actions of files in the table's directory) and the
    removal of the files `removed` as the version after the snapshot's, as delta-rs's
    `create_write_transaction` would ("WRITE", appending; `mark`: its user metadata); False,
    nothing done, when another commit took that version (or links cannot be made here), or
    a file to remove is not the snapshot's."""
    if any(name not in snapshot.files for name in removed):
        return False
    now = int(time.time() * 1000)
    info = {"timestamp": now, "operation": "WRITE",
            "operationParameters": {"mode": "Append", "partitionBy": "[]"},
            "engineInfo": ENGINE, "clientVersion": ENGINE}
    if mark is not None:
        info["userMetadata"] = mark
    actions = [{"commitInfo": info},
               *({"add": {"path": a.path, "partitionValues": {}, "size": a.size,
                          "modificationTime": a.modification_time,
                          "dataChange": a.data_change, "stats": a.stats}} for a in added),
               *({"remove": {"path": snapshot.files[name]["path"], "dataChange": True,
                             "deletionTimestamp": now, "extendedFileMetadata": False}}
                 for name in removed)]
    log_dir = os.path.join(snapshot.path, "_delta_log")
    temporary = os.path.join(log_dir, f".{ENGINE}-{uuid.uuid4()}.json.tmp")
    with open(temporary, "w", encoding="utf-8") as out:
        out.write("".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions))
    try:
        os.link(temporary, commit_file(snapshot.path, snapshot.version + 1))
    except OSError:  # taken (FileExistsError), or no links on this file system
        return False
    finally:
        os.unlink(temporary)
    return True


def checkpoint_due(snapshot: Snapshot, version: int) -> bool:
    """Whether a commit of `version` to the table asks for a checkpoint (delta-rs writes one
    every `delta.checkpointInterval` versions after a commit of its own)."""
    try:
        interval = int(snapshot.configuration.get("delta.checkpointInterval",
                                                  CHECKPOINT_INTERVAL))
    except ValueError:
        interval = CHECKPOINT_INTERVAL
    return interval > 0 and version > 0 and version % interval == 0
