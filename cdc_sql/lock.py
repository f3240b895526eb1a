"""One writer per target: `run` and `maintain` hold an exclusive lock on `<target>/_lock`.

An flock, so the kernel releases it when the holder dies in any way (SIGKILL included): a lock
is never left stale. Targets on object stores (s3://...) cannot be locked from here; there,
scheduling must keep runs apart (a Databricks job's max_concurrent_runs: 1).
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from cdc_sql.errors import StateError
from cdc_sql.lake.tables import storage

log = logging.getLogger("cdc_sql")


@contextmanager
def target_lock(root: str, command: str) -> Iterator[None]:
    if storage(root) != "local":
        log.info("target %s is not on this file system: not locked; keep runs apart by "
                 "scheduling", root)
        yield
        return
    root = root.removeprefix("file://")
    path = Path(root) / "_lock"
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        handle = open(path, "a+")
    except OSError as exc:
        raise StateError(f"target.path {root} is not writable ({exc.strerror}): point "
                         f"target.path at a directory this user can create and write") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = _holder(handle.read())
            raise StateError(f"another cdc-sql process is writing to {root} ({holder}): two "
                             f"writers on one target would corrupt its state, so this "
                             f"`{command}` stops; wait for that one to finish or stop it "
                             f"(SIGTERM), then run again") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "command": command,
                                 "since": dt.datetime.now(dt.timezone.utc).isoformat(
                                     timespec="seconds")}))
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def _holder(text: str) -> str:
    try:
        info = json.loads(text)
        return f"`{info['command']}`, pid {info['pid']} on {info['host']} since {info['since']}"
    except (ValueError, KeyError):
        return "holder unknown"
