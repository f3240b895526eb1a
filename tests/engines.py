"""The engine the tests run on, chosen by CDC_SQL_TEST_ENGINE; scripts/test.sh runs the suite on
the default and subsets again on the others (docs/engines.md, "What runs in CI"):

| CDC_SQL_TEST_ENGINE | the engine                                               | engine mode |
|---------------------|----------------------------------------------------------|-------------|
| sail (default)      | the embedded Sail, in this process                       | sail        |
| local               | JVM Spark `local[*]` with Delta Lake, in this process     | local       |
| cluster             | a Spark standalone master and two workers on loopback,   | remote      |
|                     | behind a Spark Connect server with Delta Lake            |             |
| sail-server         | `sail spark server` (SAIL_MODE=local-cluster), a process | remote      |

One engine per test session (a JVM costs seconds to start). The pipelines the tests write
name the same engine (`engine:`), so a `cdc-sql run` in a subprocess (the kill tests) uses it
too: a remote engine by its URL, mode local with a JVM of its own. CDC_SQL_TEST_SQL_ONLY=1
also sets `engine.sql_only` in them: every window through the engine's SQL.
"""
from __future__ import annotations

import os

import pytest

KINDS = ("sail", "local", "cluster", "sail-server")


def kind() -> str:
    chosen = os.environ.get("CDC_SQL_TEST_ENGINE", "sail")
    if chosen not in KINDS:
        raise pytest.UsageError(f"CDC_SQL_TEST_ENGINE={chosen}: one of {', '.join(KINDS)}")
    return chosen


def sql_only() -> bool:
    return os.environ.get("CDC_SQL_TEST_SQL_ONLY", "") not in ("", "0")


def on_jvm() -> bool:
    return kind() in ("local", "cluster")


# Where a killed run stops on the engine's side of a batch: staging and merging silver and
# history, and the checkpoint written after them.
ENGINE_POINTS = ("silver.staged", "silver.merged", "history.staged", "history.merged",
                 "state.committed")


def kill_points(points: list[str], engine_points: tuple[str, ...] = ENGINE_POINTS) -> list[str]:
    """The fault points (cdc_sql/faults.py) a kill test stops its runs at: each of `points`,
    but with engine `local`, where every killed run starts a JVM of its own (seconds each),
    only those of `engine_points` (the engine's, or a test's own among them). The others run
    the same code on every engine, and the default suite kills there."""
    return [p for p in points if kind() != "local" or p.partition("@")[0] in engine_points]


@pytest.fixture(scope="session")
def engine_server():
    """The engine's server process, for the kinds that have one (None otherwise)."""
    from cdc_sql.dev.spark_cluster import SailServer, StandaloneCluster

    servers = {"cluster": StandaloneCluster, "sail-server": SailServer}
    if kind() not in servers:
        yield None
        return
    with servers[kind()]() as server:
        yield server


@pytest.fixture(scope="session")
def engine_settings(engine_server) -> dict:
    """The `engine:` settings of the pipelines the tests write."""
    settings: dict = {"sail": {}, "local": {"mode": "local"}}[kind()] if engine_server is None \
        else {"mode": "remote", "url": engine_server.url}
    return {**settings, "sql_only": "true"} if sql_only() else settings


@pytest.fixture(scope="session")
def engine(engine_server, engine_settings):
    from cdc_sql import engine as engines

    started = engines.start(engine_settings.get("mode", "sail"), engine_settings.get("url", ""))
    yield started
    started.stop()
