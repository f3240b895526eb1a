"""Shared fixtures: one private MariaDB and one engine per test session (tests/engines.py)."""
from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest
from hypothesis import settings

from cdc_sql.config.model import load_pipeline
from cdc_sql.dev.mariadb import PASSWORD, USER, MariaDB
from tests.engines import engine, engine_server, engine_settings  # noqa: F401 - fixtures

pytest_plugins = ["tests.objstores",  # the object-store emulators and lake_root
                  "tests.transport_faults"]  # a test that met a broken Sail stream runs again

# No test times anything: Hypothesis's deadline (200 ms an example) failed examples that wrote
# a Delta table on a loaded machine (test_file_merge.py: 398 ms, then 134 ms on its retry).
settings.register_profile("untimed", deadline=None)
settings.load_profile("untimed")

_names = itertools.count(1)


@pytest.fixture(scope="session")
def mariadb():
    with MariaDB() as server:
        yield server


@pytest.fixture
def database(mariadb):
    """A fresh, empty database name on the shared server."""
    name = f"t{next(_names)}"
    mariadb.execute(f"CREATE DATABASE {name}")
    yield name
    mariadb.execute(f"DROP DATABASE IF EXISTS {name}")


@pytest.fixture
def make_pipeline(tmp_path, mariadb, lake_root, engine_settings):  # noqa: F811 - the fixture
    """Write a pipeline YAML for the shared server and load it."""

    def make(tables: str, target: dict | None = None, **source) -> object:
        settings = {"host": "127.0.0.1", "port": mariadb.port, "user": USER,
                    "password": "${TEST_MYSQL_PASSWORD}", "server_id": 6000 + next(_names),
                    "chunk_size": 1000, "parallelism": 2, **source}
        lines = "\n".join(f"  {k}: {v}" for k, v in settings.items())
        extra = "".join(f"  {k}: {v}\n" for k, v in (target or {}).items())
        engine_yaml = "".join(f"  {k}: {v}\n" for k, v in engine_settings.items())
        text = (f"name: test\nsource:\n{lines}\ntarget:\n  path: {lake_root}\n{extra}"
                f"{'engine:' + chr(10) + engine_yaml if engine_yaml else ''}"
                f"tables:\n{textwrap.indent(textwrap.dedent(tables).strip(), '  ')}\n")
        path = Path(tmp_path / "pipeline.yaml")
        path.write_text(text)
        return load_pipeline(path, environ={"TEST_MYSQL_PASSWORD": PASSWORD})

    return make
