"""Where a lake lives: a local directory or an object-store URL, as one value.

`target.path` is either a path on this machine (`/data/lake`, `file:///data/lake`) or a URL
(`s3://bucket/lake`, `s3a://`, `gs://`, `az://`, `abfss://container@account.dfs.core.windows.net/`,
`dbfs:/`, ...). A URL must stay a URL everywhere: `pathlib` folds `s3://lake/x` into `s3:/lake/x`,
which no storage library recognises. So a `Location` keeps the text, joins parts with `/`, and
says which storage it is on; local paths are absolute, without `file://`, so that the code for
local lakes (flock, pyarrow's writers, renames) takes them as they are.

Credentials never belong in a URL (it is logged, shown by `status`, stored in state's errors):
`refused` says why a target URL is not accepted, and `redact` takes secrets out of any text
before it is shown.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

OBJECT_STORES = ("s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "azure")
AZURE = ("az", "abfs", "abfss", "adl", "azure")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
# user:password@ in any URL (an AWS secret key may hold `/`), and query parameters that carry
# a signature or a key
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^@\s]*?:[^@\s]*@")
_SECRET_PARAMETER = re.compile(r"(?i)\b(sig|signature|x-amz-signature|x-amz-credential|"
                               r"x-amz-security-token|x-goog-signature|x-goog-credential|"
                               r"token|access_key|secret|password|key)=[^&\s;]+")


def storage(path) -> str:
    """'local' for a plain path or file://, else the URL scheme (s3, gs, dbfs, ...)."""
    match = _SCHEME.match(str(path))
    if match is None or len(match.group(1)) == 1:  # no scheme (or a Windows drive letter)
        return "local"
    scheme = match.group(1).lower()
    return "local" if scheme == "file" else scheme


@dataclass(frozen=True)
class Location:
    """A lake root or a place under it: `str()` is what delta-rs, the engines and the file
    system take (a plain path for a local lake, the URL otherwise)."""

    url: str

    @classmethod
    def of(cls, place: "Location | str | os.PathLike") -> "Location":
        if isinstance(place, Location):
            return place
        text = os.fspath(place) if isinstance(place, os.PathLike) else str(place)
        if storage(text) == "local":
            if re.match(r"(?i)^file:", text):
                text = re.sub(r"(?i)^file:(//[^/]*)?", "", text)  # file:///x, file:/x -> /x
            return cls(text.rstrip("/") or "/")
        scheme, rest = text.split(":", 1)
        return cls(f"{scheme.lower()}:{rest.rstrip('/')}")

    def __str__(self) -> str:
        return self.url

    def __fspath__(self) -> str:
        if not self.local:
            raise TypeError(f"{self.redacted()} is not a path on this machine")
        return self.url

    def __truediv__(self, part: str) -> "Location":
        return Location(f"{self.url.rstrip('/')}/{str(part).strip('/')}")

    @property
    def storage(self) -> str:
        return storage(self.url)

    @property
    def local(self) -> bool:
        return self.storage == "local"

    @property
    def object_store(self) -> bool:
        """On S3, GCS or Azure: reached from this process through object_store (delta-rs,
        Sail, obstore), each reading its settings from the environment."""
        return self.storage in OBJECT_STORES

    def redacted(self) -> str:
        return redact(self.url)


def refused(text: str) -> str | None:
    """Why `text` is not accepted as a target URL; None when it is. Credentials come from the
    environment (docs/operations.md, "Object storage"), never from the URL: a password in
    `user:password@`, any user in an S3 or GCS URL (`s3://KEY:SECRET@bucket`), or a query
    (a SAS token, a signed URL)."""
    if storage(text) == "local":
        return None
    scheme, _, rest = text.partition(":")
    scheme, rest = scheme.lower(), rest.removeprefix("//")
    if _USERINFO.match(text) or "@" in rest.split("/", 1)[0] and scheme not in AZURE:
        return ("the URL holds credentials (before its `@`): give them in the environment "
                "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AZURE_STORAGE_ACCOUNT_KEY, "
                "GOOGLE_APPLICATION_CREDENTIALS, ...), never in target.path")
    parts = urlsplit(text)
    if parts.query or parts.fragment:
        return ("the URL has a query or fragment (a SAS token or signature would be a secret "
                "in the pipeline file): give credentials in the environment, and target.path "
                "as scheme://bucket/path")
    if scheme in OBJECT_STORES and not parts.netloc:
        return f"the URL names no bucket or container: {scheme}://<bucket>/<path>"
    return None


def redact(text: str) -> str:
    """`text` with the password of any `scheme://user:password@` and the values of secret
    query parameters replaced by `***` (for logs and error messages)."""
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", str(text))
    return _SECRET_PARAMETER.sub(lambda m: f"{m.group(1)}=***", text)
