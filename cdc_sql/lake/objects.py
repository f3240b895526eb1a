"""Single objects in an object store, beside the lake's Delta tables: the target's lease
(cdc_sql/lock.py), metrics files, and `validate`'s probe.

Through obstore, the Python binding of the same Rust `object_store` crate that delta-rs and Sail
write the tables with: one library, one reading of the environment (`AWS_*`, `AZURE_*`,
`GOOGLE_*`), and the same conditional puts. A Delta commit is a put that must not replace an
existing object (`If-None-Match: *` on S3, `x-goog-if-generation-match: 0` on GCS,
`If-None-Match: *` on Azure); `probe` makes exactly that request twice, so a store that ignores
it (and would let two commits of one version both succeed, one lost) is found before any
commit, not after.
"""
from __future__ import annotations

import datetime as dt
import functools
import re
import uuid
from dataclasses import dataclass

from cdc_sql.errors import CdcError
from cdc_sql.location import AZURE, Location

# A lock or probe request gives up quickly rather than retrying for minutes (object_store's
# default: 10 retries within 180 s): `validate` must answer, and a lease is renewed often.
_RETRY = {"max_retries": 2, "backoff": {"init_backoff": dt.timedelta(milliseconds=100),
                                        "max_backoff": dt.timedelta(seconds=1)},
          "retry_timeout": dt.timedelta(seconds=15)}


class Taken(Exception):
    """A conditional put lost: the object exists (create) or changed (update)."""


@dataclass(frozen=True)
class Found:
    """An object's content and the version a conditional update names."""

    data: bytes
    version: dict
    modified: dt.datetime


def store(root: Location):
    """The object store holding `root`, its paths relative to `root`."""
    from obstore.store import from_url

    try:
        return from_url(str(root), retry_config=_RETRY)  # client options: the environment's
    except Exception as exc:  # noqa: BLE001 - obstore's configuration errors
        raise CdcError(f"target {root.redacted()}: cannot configure its object store: "
                       f"{first_line(exc)}") from None


@functools.lru_cache(maxsize=256)
def _cached(url: str):
    return store(Location.of(url))


def has_delta_log(path: str) -> bool:
    """Whether a Delta table is at `path` (an object-store URL): an object under its
    `_delta_log/`. Not delta-rs's `is_deltatable`, which holds Python's lock while it waits on
    the network: with delta-rs's own threads pulling batches of streamed writes from Python
    (snapshot splits in parallel), the two waited for each other forever (seen on S3)."""
    import obstore

    for chunk in obstore.list(_cached(path), prefix="_delta_log/", chunk_size=1):
        return bool(chunk)
    return False


def create(objects, name: str, data: bytes) -> dict:
    """Write `name` only if it does not exist yet (Taken otherwise); its new version."""
    import obstore
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    try:
        return _version(obstore.put(objects, name, data, mode="create"))
    except (AlreadyExistsError, PreconditionError):
        raise Taken(name) from None


def update(objects, name: str, data: bytes, version: dict) -> dict:
    """Replace `name` only if it is still at `version` (Taken otherwise); its new version."""
    import obstore
    from obstore.exceptions import AlreadyExistsError, NotFoundError, PreconditionError

    try:
        return _version(obstore.put(objects, name, data, mode=version))
    except (AlreadyExistsError, PreconditionError, NotFoundError):
        raise Taken(name) from None


def overwrite(objects, name: str, data: bytes) -> None:
    """Write `name` whole (an object store's put is atomic: readers see the old or the new)."""
    import obstore

    obstore.put(objects, name, data)


def read(objects, name: str) -> Found | None:
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        found = obstore.get(objects, name)
        data = bytes(found.bytes())
    except (NotFoundError, FileNotFoundError):
        return None
    meta = found.meta
    return Found(data, _version(meta), meta["last_modified"])


def delete(objects, name: str) -> None:
    import obstore
    from obstore.exceptions import NotFoundError

    try:
        obstore.delete(objects, name)
    except (NotFoundError, FileNotFoundError):
        pass


def probe(root: Location) -> None:
    """Check that the target's bucket or container is reachable and writable, and that it
    refuses a second put-if-absent of one name (what keeps concurrent Delta commits from
    overwriting each other); CdcError in one line otherwise."""
    objects = store(root)
    name = f"_cdc_sql_probe/{uuid.uuid4().hex}"
    try:
        create(objects, name, b"1")
    except Exception as exc:  # noqa: BLE001 - unreachable, no bucket, no credentials...
        raise CdcError(f"target {root.redacted()} is not writable: "
                       f"{explain(exc, root.storage)}") from None
    try:
        create(objects, name, b"2")
        unsafe = True
    except Taken:
        unsafe = False
    except Exception as exc:  # noqa: BLE001 - a store that rejects conditional puts outright
        delete(objects, name)
        raise CdcError(f"target {root.redacted()} does not take conditional puts "
                       f"({explain(exc, root.storage)}), which Delta commits need") from None
    delete(objects, name)
    if unsafe:
        raise CdcError(f"target {root.redacted()} ignores put-if-absent (If-None-Match): two "
                       f"writers could commit the same Delta version and one commit would be "
                       f"lost. Use a store that honours conditional writes (AWS S3 does since "
                       f"2024; see docs/engines.md, \"Object storage\")")


def unsafe_settings(environ) -> str | None:
    """Why the environment's S3 settings would let a Delta commit be lost; None when they
    would not. delta-rs 1.x commits with put-if-absent (`probe` checks the store honours it);
    AWS_S3_ALLOW_UNSAFE_RENAME asks it to give up on safety where it cannot have it, and a
    locking provider (DynamoDB) is no longer read by it: a setup relying on either is not
    what it seems."""
    unsafe = environ.get("AWS_S3_ALLOW_UNSAFE_RENAME", "").strip().lower()
    if unsafe in ("1", "true", "yes", "on"):
        return ("AWS_S3_ALLOW_UNSAFE_RENAME is set: cdc-sql never commits to S3 without "
                "put-if-absent (two writers of one Delta version would lose a commit); unset "
                "it (see docs/engines.md, \"Object storage\")")
    provider = environ.get("AWS_S3_LOCKING_PROVIDER", "").strip()
    if provider:
        return (f"AWS_S3_LOCKING_PROVIDER={provider} is set, but delta-rs 1.x no longer uses "
                f"a locking provider: its commits rely on the store's conditional puts, which "
                f"`validate` checks; unset it (see docs/engines.md, \"Object storage\")")
    return None


def check_target(root: Location, environ) -> str:
    """`validate`'s check of an object-store target: the settings, then the probe; one line
    saying what holds, or CdcError."""
    if root.storage in ("s3", "s3a"):
        problem = unsafe_settings(environ)
        if problem is not None:
            raise CdcError(f"target {root.redacted()}: {problem}")
    probe(root)
    return (f"target {root.redacted()}: reachable and writable; it refuses a second "
            f"put-if-absent, so concurrent Delta commits cannot overwrite each other")


def explain(exc: Exception, storage: str = "s3") -> str:
    """One line for an object store's error: what went wrong, without its debug dump;
    `storage` (a Location's) says which setting names the endpoint."""
    name, text = type(exc).__name__.lower(), first_line(exc)
    lowered = text.lower()
    status = {int(code) for code in re.findall(r"(?:status code: |code: |\()(4\d\d)\b", text)}
    if "error sending request" in lowered or "connect" in lowered or "dns" in lowered or \
            "timed out" in lowered:
        return f"the endpoint cannot be reached (check {_endpoint(storage)} or the network): {text}"
    if "unauthenticated" in name or 401 in status:
        return f"no valid credentials (set them in the environment): {text}"
    if "permission" in name or 403 in status or "accessdenied" in lowered:
        return f"access denied (check the credentials in the environment): {text}"
    if 404 in status or "nosuchbucket" in lowered or "containernotfound" in lowered:
        return f"the bucket or container does not exist: {text}"
    return text


def _endpoint(storage: str) -> str:
    """The setting that names a store's endpoint (docs/operations.md, "Object storage")."""
    if storage in ("gs", "gcs"):
        return "the gcs_base_url of the GOOGLE_SERVICE_ACCOUNT key file"
    if storage in AZURE:
        return "AZURE_STORAGE_ACCOUNT_NAME, or AZURITE_BLOB_STORAGE_URL for Azurite"
    return "AWS_ENDPOINT_URL"


def first_line(exc: BaseException) -> str:
    from cdc_sql.location import redact

    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return redact(lines[0] if lines else type(exc).__name__)[:300]


def _version(result) -> dict:
    return {k: result[k] for k in ("e_tag", "version") if result.get(k) is not None}
