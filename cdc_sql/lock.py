"""One writer per target: `run` and `maintain` hold the target's lock, `<target>/_lock`.

- On a local path, an flock: the kernel releases it when the holder dies in any way (SIGKILL
  included), so it is never left stale.
- In an object store (S3, GCS, Azure), a lease: an object `_lock` that names its holder and is
  written only by conditional puts (create if absent; replace only the version last read), so
  of two writers racing for it exactly one wins. The holder renews it every LEASE_SECONDS / 3;
  a holder that died stops renewing, and once its lease is LEASE_SECONDS old (`age`: by the
  store's last-modified time or the holder's own, whichever is later) the next run takes it
  over, again by a conditional put; a run that finds a lease two renewals late waits for it to
  expire rather than failing. Hosts' clocks must agree within LEASE_SECONDS / 3. A holder that
  cannot renew within 2/3 of it (a partition, a stalled process) has lost the lease: the
  command is told to stop (`on_lost`) and fails. Releasing writes an ended lease, by version
  too, so a late release never removes another writer's lease.
- Other schemes (`dbfs:/`, `hdfs://`) are reached only by the engine: not locked from here;
  scheduling keeps runs apart there (a Databricks job's max_concurrent_runs: 1).
"""
from __future__ import annotations

import datetime as dt
import fcntl
import json
import logging
import os
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from cdc_sql.errors import StateError
from cdc_sql.location import Location

log = logging.getLogger("cdc_sql")
LOCK = "_lock"
LEASE_SECONDS = 60.0  # CDC_SQL_LEASE_SECONDS overrides it (object-store tests kill runs: 0.3 s)


def lease_seconds() -> float:
    return float(os.environ.get("CDC_SQL_LEASE_SECONDS", LEASE_SECONDS))


@contextmanager
def target_lock(root: Location | str, command: str,
                on_lost: Callable[[], None] | None = None) -> Iterator[None]:
    root = Location.of(root)
    if root.local:
        with _flock(root, command):
            yield
    elif root.object_store:
        with _lease(root, command, on_lost or (lambda: None)):
            yield
    else:
        log.info("target %s is reached only by the engine: not locked; keep runs apart by "
                 "scheduling", root.redacted())
        yield


def _holder_record(command: str, **more) -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
            "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **more}


def _refusal(root: Location, holder: str, command: str) -> StateError:
    return StateError(f"another cdc-sql process is writing to {root.redacted()} ({holder}): "
                      f"two writers on one target would corrupt its state, so this "
                      f"`{command}` stops; wait for that one to finish or stop it (SIGTERM), "
                      f"then run again")


# -- a local path: flock ---------------------------------------------------------------------
@contextmanager
def _flock(root: Location, command: str) -> Iterator[None]:
    path = Path(root) / LOCK
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
            raise _refusal(root, holder(handle.read()), command) from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(_holder_record(command)))
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def holder(text: str | bytes) -> str:
    try:
        info = json.loads(text)
        return f"`{info['command']}`, pid {info['pid']} on {info['host']} since {info['since']}"
    except (ValueError, KeyError, TypeError):
        return "holder unknown"


# -- an object store: a lease ----------------------------------------------------------------
def age(record: dict, modified: dt.datetime, now: dt.datetime) -> float:
    """Seconds since a lease read from the store was last renewed: by the later of the
    store's last-modified time (whole seconds on S3) and the holder's own `renewed` time, so
    that neither a holder's slow clock nor the store's rounding makes a live lease look old."""
    renewed = modified
    try:
        renewed = max(modified, dt.datetime.fromisoformat(record["renewed"]))
    except (KeyError, TypeError, ValueError):
        pass
    return (now - renewed).total_seconds()


def standing(record: dict, modified: dt.datetime, now: dt.datetime) -> str:
    """'live' (refuse), 'ended' or 'expired' (take over), or 'silent' (two renewals missed:
    its holder is probably gone; wait for it to expire, then look again)."""
    if record.get("ended"):
        return "ended"
    seconds, old = float(record.get("lease_seconds", lease_seconds())), age(record, modified, now)
    return "expired" if old >= seconds else "silent" if old >= seconds * 2 / 3 else "live"


def _parse(data: bytes) -> dict:
    try:
        record = json.loads(data)
        return record if isinstance(record, dict) else {}
    except ValueError:
        return {}


class _Lease:
    """A lease this process holds: renewed on a thread of its own until released."""

    def __init__(self, objects, root: Location, command: str, on_lost: Callable[[], None]):
        self.objects, self.root, self.command, self.on_lost = objects, root, command, on_lost
        self.version: dict = {}
        self.lost = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="lease", daemon=True)

    def record(self, **more) -> bytes:
        now = dt.datetime.now(dt.timezone.utc).isoformat()
        return json.dumps(_holder_record(self.command, lease_seconds=lease_seconds(),
                                         renewed=now, **more)).encode()

    def take(self) -> None:
        """Hold the lease, or StateError naming its holder."""
        from cdc_sql.lake import objects

        for _ in range(5):  # lost races, and a silent lease waited out
            try:
                self.version = objects.create(self.objects, LOCK, self.record())
                return
            except objects.Taken:
                pass
            found = objects.read(self.objects, LOCK)
            if found is None:
                continue  # removed by hand meanwhile
            record, now = _parse(found.data), dt.datetime.now(dt.timezone.utc)
            state = standing(record, found.modified, now)
            if state == "live":
                raise _refusal(self.root, holder(found.data), self.command)
            if state == "silent":
                time.sleep(max(0.0, float(record.get("lease_seconds", lease_seconds()))
                               - age(record, found.modified, now)) + 0.05)
                continue
            try:
                self.version = objects.update(self.objects, LOCK, self.record(), found.version)
            except objects.Taken:
                continue
            if state == "expired":
                log.warning("took over the lease on %s from %s: not renewed for %.0f s (that "
                            "process died or lost its connection)", self.root.redacted(),
                            holder(found.data), age(record, found.modified, now))
            return
        found = objects.read(self.objects, LOCK)
        raise _refusal(self.root, holder(found.data if found else b""), self.command)

    def renew(self) -> None:
        """Keep the lease from now on, on its own thread, until `release`."""
        self._thread.start()

    def _renew(self) -> None:
        from cdc_sql.lake import objects

        renewed = dt.datetime.now(dt.timezone.utc)
        while not self._stop.wait(lease_seconds() / 3):
            try:
                self.version = objects.update(self.objects, LOCK, self.record(), self.version)
                renewed = dt.datetime.now(dt.timezone.utc)
                continue
            except objects.Taken:
                self.lost = "another process took it over"
            except Exception as exc:  # noqa: BLE001 - the store unreachable: try again
                if (dt.datetime.now(dt.timezone.utc) - renewed).total_seconds() \
                        < lease_seconds() * 2 / 3:
                    log.warning("could not renew the lease on %s (%s); trying again",
                                self.root.redacted(), objects.first_line(exc))
                    continue
                self.lost = f"it could not be renewed in time: {objects.first_line(exc)}"
            log.error("lost the lease on %s (%s): stopping", self.root.redacted(), self.lost)
            self.on_lost()
            return

    def release(self) -> None:
        from cdc_sql.lake import objects

        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if not self.lost:
            try:
                objects.update(self.objects, LOCK, self.record(ended=True), self.version)
            except Exception as exc:  # noqa: BLE001 - it expires by itself
                log.warning("could not release the lease on %s (%s): it expires in %.0f s",
                            self.root.redacted(), objects.first_line(exc), lease_seconds())


@contextmanager
def _lease(root: Location, command: str, on_lost: Callable[[], None]) -> Iterator[None]:
    from cdc_sql.lake import objects

    problem = objects.unsafe_settings(os.environ) if root.storage in ("s3", "s3a") else None
    if problem is not None:
        raise StateError(f"target {root.redacted()}: {problem}")
    lease = _Lease(objects.store(root), root, command, on_lost)
    try:
        lease.take()
    except StateError:
        raise
    except Exception as exc:  # noqa: BLE001 - unreachable, no bucket, no credentials
        raise StateError(f"target {root.redacted()} cannot be locked: "
                         f"{objects.explain(exc, root.storage)}") from None
    lease.renew()
    try:
        yield
    finally:
        lease.release()
    if lease.lost:
        raise StateError(f"this `{command}` lost its lease on {root.redacted()} "
                         f"({lease.lost}) and stopped; run it again")
