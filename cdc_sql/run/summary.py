"""What a run did, as the state's `last` run entry and the metrics record it."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from cdc_sql.lake.state import RunEntry


@dataclass(frozen=True)
class Batch:
    """One bronze or silver commit of the run, for metrics (ops/metrics.py)."""

    phase: str                # capture, merge
    table: str | None = None  # a merge's silver table
    rows: int | None = None   # a capture batch's rows
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {k: v for k, v in vars(self).items() if v is not None}


@dataclass
class RunSummary:
    run_id: str
    started_at: str
    outcome: str = "failed"
    snapshot_rows: int = 0
    captured_changes: int = 0
    merged_tables: set[str] = field(default_factory=set)
    seconds_by_phase: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None

    @contextmanager
    def timed(self, phase: str):
        """Add the phase's wall time to its seconds."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds_by_phase[phase] = round(
                self.seconds_by_phase.get(phase, 0.0) + time.monotonic() - started, 3)

    def entry(self) -> RunEntry:
        return RunEntry(run_id=self.run_id, started_at=self.started_at, outcome=self.outcome,
                        seconds=self.seconds, snapshot_rows=self.snapshot_rows,
                        captured_changes=self.captured_changes,
                        merged_tables=sorted(self.merged_tables),
                        **{f"seconds_{p}": s for p, s in self.seconds_by_phase.items()},
                        error=self.error)
