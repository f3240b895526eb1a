"""The checkpoint: an append-only Delta table under `<target>/_state`; the newest entry wins.

Entries are (kind, name) -> JSON value:
- ("split", "<db.table>#<id>"): a snapshot split's bounds, status, watermark, attempt, rows;
- ("table", "<silver name>"): the applied offset P and whether the snapshot is merged;
- ("capture", "binlog"): where the binlog reader resumes, a transaction boundary;
- ("run", "last"): the last run and its outcome;
- ("pipeline", "owner"): the pipeline this target belongs to (one target, one pipeline).
Several entries written together land in one Delta commit, so they change together or not at all.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa

from cdc_sql.errors import StateError

STATE_SCHEMA = pa.schema([("kind", pa.string()), ("name", pa.string()), ("value", pa.string()),
                          ("seq", pa.int64()), ("run_id", pa.string()),
                          ("written_at", pa.timestamp("us", tz="UTC"))])


@dataclass
class Checkpoint:
    entries: dict[tuple[str, str], dict] = field(default_factory=dict)

    def get(self, kind: str, name: str) -> dict | None:
        return self.entries.get((kind, name))

    def of_kind(self, kind: str) -> dict[str, dict]:
        return {name: value for (k, name), value in self.entries.items() if k == kind}

    def splits(self, source_table: str) -> list[dict]:
        prefix = f"{source_table}#"
        found = [v for name, v in self.of_kind("split").items() if name.startswith(prefix)]
        return sorted(found, key=lambda s: s["split_id"])


def check_owner(checkpoint: Checkpoint, pipeline_name: str, root: str) -> None:
    """Refuse a target that another pipeline writes: their checkpoints would overwrite
    each other's offsets and splits."""
    owner = checkpoint.get("pipeline", "owner")
    if owner and owner["name"] != pipeline_name:
        raise StateError(f"target {root} belongs to pipeline `{owner['name']}` (from "
                         f"{owner.get('file') or 'an unknown file'}), and this is pipeline "
                         f"`{pipeline_name}`: two pipelines on one target would overwrite each "
                         f"other's state. Give each pipeline its own target.path (or, if this "
                         f"is the same pipeline renamed, use its old name)")


class State:
    def __init__(self, engine, root: str):
        self.engine = engine
        self.path = f"{root}/_state/checkpoint"
        self.run_id = uuid.uuid4().hex[:12]
        self._last_seq = 0
        self._lock = threading.Lock()

    def load(self) -> Checkpoint:
        checkpoint = Checkpoint()
        if not self.engine.exists(self.path):
            return checkpoint
        rows = self.engine.read_arrow(self.path, ["kind", "name", "value", "seq"]).to_pylist()
        for row in sorted(rows, key=lambda r: r["seq"]):
            checkpoint.entries[(row["kind"], row["name"])] = json.loads(row["value"])
        return checkpoint

    def write(self, *entries: tuple[str, str, dict]) -> None:
        """Append entries in one commit; `seq` orders them across runs and threads."""
        import datetime as dt

        if not entries:
            return
        now = dt.datetime.now(dt.timezone.utc)
        rows = []
        with self._lock:  # snapshot readers report splits from several threads
            for kind, name, value in entries:
                self._last_seq = max(time.time_ns(), self._last_seq + 1)
                rows.append({"kind": kind, "name": name, "value": json.dumps(value, sort_keys=True),
                             "seq": self._last_seq, "run_id": self.run_id, "written_at": now})
        table = pa.Table.from_pylist(rows, schema=STATE_SCHEMA)
        self.engine.append_arrow(self.path, table.to_batches(), STATE_SCHEMA)

    def compact(self) -> int:
        """Rewrite the log to its newest entry per (kind, name), in one commit; returns the
        entries dropped. Loads read the whole log, so this keeps them fast (maintain)."""
        if not self.engine.exists(self.path):
            return 0
        table = self.engine.read_arrow(self.path)
        newest: dict[tuple[str, str], dict] = {}
        for row in sorted(table.to_pylist(), key=lambda r: r["seq"]):
            newest[(row["kind"], row["name"])] = row
        kept = pa.Table.from_pylist(sorted(newest.values(), key=lambda r: r["seq"]),
                                    schema=STATE_SCHEMA)
        self.engine.overwrite_arrow(self.path, kept, STATE_SCHEMA)
        return table.num_rows - kept.num_rows

