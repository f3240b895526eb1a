"""What every phase of one run is handed: the pipeline, its lake and state, the stop request, the
run's worker processes (started by the first merge pass that wants them)."""
from __future__ import annotations

import threading
from dataclasses import dataclass

from cdc_sql.config.model import Pipeline
from cdc_sql.lake.lake import Lake
from cdc_sql.lake.state import State
from cdc_sql.workers import Workers


@dataclass(frozen=True)
class Run:
    pipeline: Pipeline
    lake: Lake
    state: State
    stop: threading.Event
    workers: Workers
