"""Silver's first version written during the snapshot, from the rows in hand.

A plain table's first window creates silver holding the snapshot rows (lake/small_merge.py).
Read back from bronze and written again, those rows cost silver a third of the snapshot's time
(docs/performance.md), most of it decoding what was just encoded. So while a
read of splits streams into bronze, its rows also go, in silver's columns, into Parquet files
of their own: `<root>/_first/<silver name>/<attempt>/`, with a manifest (`<attempt>.json`: the
splits, the watermark, silver's columns, the files and their statistics) written once the files
are complete and bronze holds the rows. Only where silver will be created in this process
(lake/silver/route.written_ahead: a plain table, a local lake, silver not there yet), with a
watermark known at read time (a GTID watermark gets its offset later, from the binlog reader).

When the first window creates silver, `take` hands over these files, moved into silver's
directory for the creating commit, if every attempt state records for the window's splits has
a manifest that agrees with state (`agreeing`: the same splits, the same watermark, silver's
columns); else silver is created from bronze, as without them. Either way the directory is
removed once silver exists. Files are never trusted beyond their manifest: a read that failed
or was killed leaves none (or files no manifest names); an attempt state never recorded is
ignored. Bronze stays the record silver can always be rebuilt from.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import pyarrow as pa

from cdc_sql.errors import out_of_space
from cdc_sql.lake import parquet_files
from cdc_sql.lake.lake import Lake
from cdc_sql.planner import SplitRef

log = logging.getLogger("cdc_sql")
MANIFEST = "{attempt}.json"


@dataclass(frozen=True)
class Target:
    """A silver table the snapshot rows of one source table are written into as read."""

    path: str            # <root>/_first/<silver name>
    schema: pa.Schema    # silver's columns (small_merge.silver_schema)


@dataclass
class Writer:
    """The silver files of one read of splits, as its batches (source columns, then the split
    id) stream by: `tee` them on the way into bronze; leaving the `with` block without an
    error writes the manifests, with one removes the files. Writing ahead is only a shortcut:
    if it fails, the read goes on and silver is later read from bronze."""

    targets: list[Target]
    attempt: str
    splits: list[int]
    watermark: str
    read_at: dt.datetime
    _files: list[parquet_files.Files] = field(default_factory=list)

    def __enter__(self) -> "Writer":
        if not self.watermark:  # known only once the binlog reader reaches it: not here
            self.targets = []
        for target in self.targets:
            os.makedirs(os.path.join(target.path, self.attempt), exist_ok=True)
            self._files.append(parquet_files.Files(os.path.join(target.path, self.attempt),
                                                   target.schema))
        return self

    def tee(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if self._files:
                try:
                    self._write(batch)
                except Exception as exc:  # noqa: BLE001 - bronze goes on; silver reads it
                    if out_of_space(exc):  # bronze cannot go on either: the run stops
                        raise
                    self._abandon(exc)
            yield batch

    def _write(self, batch: pa.RecordBatch) -> None:
        offset = pa.repeat(pa.scalar(self.watermark), batch.num_rows)
        read_at = pa.repeat(pa.scalar(self.read_at, pa.timestamp("us", tz="UTC")),
                            batch.num_rows)
        for files in self._files:
            files.write(snapshot_image(files.schema, batch, offset, read_at))

    def _abandon(self, error: Exception | None = None) -> None:
        if error is not None:
            log.warning("snapshot rows could not be written ahead into %s (%s): silver's first "
                        "version will be read from bronze",
                        ", ".join(t.path for t in self.targets), error)
        for target, files in zip(self.targets, self._files):
            with contextlib.suppress(Exception):
                files.close()
            shutil.rmtree(os.path.join(target.path, self.attempt), ignore_errors=True)
            with contextlib.suppress(OSError):
                os.remove(os.path.join(target.path, MANIFEST.format(attempt=self.attempt)))
        self.targets, self._files = [], []

    def __exit__(self, kind, *_) -> None:
        if kind is not None:
            self._abandon()
            return
        try:
            for target, files in zip(self.targets, self._files):
                _write_manifest(target, self.attempt, {
                    "splits": sorted(self.splits), "watermark": self.watermark,
                    "columns": str(target.schema),
                    "files": [{"path": a.path, "size": a.size, "stats": a.stats}
                              for a in files.close()]})
        except Exception as exc:  # noqa: BLE001 - as in tee
            self._abandon(exc)


def _write_manifest(target: Target, attempt: str, manifest: dict) -> None:
    name = os.path.join(target.path, MANIFEST.format(attempt=attempt))
    with open(name + ".tmp", "w") as out:
        json.dump(manifest, out)
    os.replace(name + ".tmp", name)  # complete, or not there


def snapshot_image(schema: pa.Schema, batch: pa.RecordBatch, offset: pa.Array,
                   read_at: pa.Array) -> pa.RecordBatch:
    """Snapshot rows in silver's columns (small_merge.silver_schema): the source's values
    (the batch's first columns), then the offset they are placed at (their split's
    watermark), `r`, and when they were read (snapshot_images.sql); with soft deletes, not
    deleted."""
    meta = {"_cdc_offset": offset, "_cdc_op": pa.repeat(pa.scalar("r"), batch.num_rows),
            "_cdc_ts": read_at, "_cdc_deleted": pa.repeat(pa.scalar(False), batch.num_rows)}
    values = schema.get_field_index("_cdc_offset")  # the source's columns come first
    return pa.RecordBatch.from_arrays(
        [*batch.columns[:values], *(meta[name] for name in schema.names[values:])], schema=schema)


def agreeing(manifests: dict[str, dict | None], splits: Iterable[SplitRef],
             columns: str) -> list[str] | None:
    """The attempts whose files hold exactly the snapshot rows of `splits` (the window's done
    splits as state records them), in split order; None unless every one of them has a
    manifest with its splits, its watermark and these columns."""
    wanted: dict[str, list[tuple[int, str]]] = {}
    for split in sorted(splits):
        wanted.setdefault(split.attempt, []).append((split.split_id, split.watermark))
    for attempt, entries in wanted.items():
        manifest = manifests.get(attempt)
        if manifest is None or manifest["columns"] != columns or \
                manifest["splits"] != [i for i, _ in entries] or \
                any(w != manifest["watermark"] for _, w in entries):
            return None
    return list(wanted) or None


def take(lake: Lake, name: str, splits: Iterable[SplitRef], schema: pa.Schema,
         silver: str) -> list | None:
    """The add actions of silver's first version as written during the snapshot, its files
    moved into `silver` (a local directory); None when they are not all there (`agreeing`)."""
    from deltalake.transaction import AddAction

    path, splits = lake.first_version_path(name), list(splits)
    manifests = {s.attempt: _manifest(path, s.attempt) for s in splits}
    attempts = agreeing(manifests, splits, str(schema))
    if attempts is None or not all(os.path.exists(os.path.join(path, a, f["path"]))
                                   for a in attempts for f in manifests[a]["files"]):
        return None
    actions, now = [], int(dt.datetime.now().timestamp() * 1000)
    try:
        os.makedirs(silver, exist_ok=True)
        for attempt in attempts:
            for f in manifests[attempt]["files"]:
                os.replace(os.path.join(path, attempt, f["path"]),
                           os.path.join(silver, f["path"]))
                actions.append(AddAction(f["path"], f["size"], {}, now, True, f["stats"]))
    except OSError:  # another file system (a mount under the lake): silver is read from bronze
        return None
    return actions


def _manifest(path: str, attempt: str) -> dict | None:
    try:
        with open(os.path.join(path, MANIFEST.format(attempt=attempt))) as found:
            return json.load(found)
    except (OSError, ValueError):
        return None


def discard(lake: Lake, name: str) -> None:
    """What was written for silver's first version, once silver exists (or is not created
    here)."""
    shutil.rmtree(lake.first_version_path(name), ignore_errors=True)
