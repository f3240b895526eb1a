"""pyarrow without pandas until something imports pandas.

pyarrow asks once, at the first array it builds from Python values (`_is_array_like`),
whether pandas can be imported, and imports it to find out: 0.13-0.2 s of every `cdc-sql`
process (pyspark[connect] installs pandas), though a run in this process never hands pyarrow
a pandas object. `defer()` has that first question answered "no" without importing pandas,
and has pyarrow told the truth as soon as anything imports pandas (pyspark when the engine
starts, a user's function), so pandas objects given to pyarrow after that convert exactly as
they always did (docs/performance.md, "Fixed costs of a run")."""
from __future__ import annotations

import importlib.util
import sys

import pyarrow as pa


def defer() -> None:
    """At a process's start, before any thread: pyarrow's probe answered without pandas; the
    first import of pandas tells pyarrow it is there. Nothing when pandas is imported already."""
    if "pandas" in sys.modules:
        return
    refusal = _Refuse()
    sys.meta_path.insert(0, refusal)
    try:
        pa.array([0])  # pyarrow's one probe, made now: pandas recorded as absent
    finally:
        sys.meta_path.remove(refusal)
    sys.meta_path.insert(0, _Watch())


def _tell_pyarrow() -> None:
    """pyarrow's shim imports pandas again when asked for it (pandas is in sys.modules by
    now) and treats pandas objects as such from then on."""
    pa.lib._pandas_api.pd  # noqa: B018 - reading the property is the asking


class _Refuse:
    """A finder that fails the import of pandas: installed only around the probe."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            raise ImportError("pandas deferred")
        return None


class _Watch:
    """A finder for pandas' first import: finds it as usual, with a loader that tells pyarrow
    once pandas has run; then steps aside."""

    def find_spec(self, name, path=None, target=None):
        if name != "pandas":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenTellPyarrow(spec.loader)
        return spec


class _ThenTellPyarrow:
    """pandas' own loader, followed by `_tell_pyarrow`."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        module.__loader__ = module.__spec__.loader = self._loader
        _tell_pyarrow()

    def __getattr__(self, name: str):
        return getattr(self._loader, name)
