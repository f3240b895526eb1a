"""Metrics of each run, for dashboards and alerts: `<target>/_metrics/run-<id>.json` (the run
summary, every bronze and silver commit with its rows and seconds, per-table lag) and
`<target>/_metrics/cdc_sql.prom`, the latest run in Prometheus text format (point node_exporter's
textfile collector at the directory). On an object store both are objects under the target
(each put is atomic); targets only the engine reaches (dbfs:/...) get the JSON as a log line.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from cdc_sql.ops import status

log = logging.getLogger("cdc_sql")
MAX_BATCHES = 1000  # commits kept per run in the metrics file


def metrics_dir(pipeline) -> Path | None:
    return Path(pipeline.root) / "_metrics" if pipeline.root.local else None


def write_run(pipeline, run, batches: list[dict], checkpoint) -> dict:
    """`run`: the run's state.RunEntry; `batches`: its commits (rows, seconds)."""
    end, logs = status.source_binlog(pipeline)
    tables = status.report(pipeline, checkpoint, end, logs)["tables"]
    document = {"pipeline": pipeline.name, **run.to_json(), "batches": batches,
                "tables": [{k: t[k] for k in ("name", "phase", "applied_offset", "lag_bytes",
                                              "lag_seconds")} for t in tables]}
    files = {f"run-{run.run_id}.json": json.dumps(document, indent=2),
             "cdc_sql.prom": prometheus(document)}
    directory = metrics_dir(pipeline)
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            _write_atomically(directory / name, text)
    elif pipeline.root.object_store:
        from cdc_sql.lake import objects

        store = objects.store(pipeline.root)
        for name, text in files.items():
            objects.overwrite(store, f"_metrics/{name}", text.encode())
    else:
        log.info("metrics %s", json.dumps(document))
    return document


def prometheus(document: dict) -> str:
    pipeline = {"pipeline": document["pipeline"]}
    lines: list[str] = []

    def metric(name: str, help_text: str, samples: list[tuple[dict, float | None]]) -> None:
        lines.extend([f"# HELP cdc_sql_{name} {help_text}", f"# TYPE cdc_sql_{name} gauge"])
        for labels, value in samples:
            if value is not None:
                lines.append(f"cdc_sql_{name}{_labels(labels)} {float(value):g}")

    metric("run_ok", "1 when the last run ended ok or stopped, 0 when it failed",
           [(pipeline, 0 if document.get("outcome") == "failed" else 1)])
    metric("run_seconds", "wall time of the last run", [(pipeline, document.get("seconds"))])
    metric("phase_seconds", "wall time of each phase of the last run",
           [({**pipeline, "phase": key[len("seconds_"):]}, value)
            for key, value in document.items() if key.startswith("seconds_")])
    metric("snapshot_rows", "rows read by snapshot splits in the last run",
           [(pipeline, document.get("snapshot_rows", 0))])
    metric("captured_changes", "binlog row changes written to bronze in the last run",
           [(pipeline, document.get("captured_changes", 0))])
    batches = document.get("batches", [])
    metric("commits", "bronze and silver commits of the last run",
           [({**pipeline, "phase": phase}, sum(b["phase"] == phase for b in batches))
            for phase in ("capture", "merge")])
    metric("commit_seconds_max", "the slowest commit of the last run, per phase",
           [({**pipeline, "phase": phase},
             max((b["seconds"] for b in batches if b["phase"] == phase), default=None))
            for phase in ("capture", "merge")])
    metric("lag_bytes", "binlog bytes the source wrote past the table's applied offset",
           [({**pipeline, "table": t["name"]}, t["lag_bytes"]) for t in document["tables"]])
    metric("lag_seconds", "seconds since the source was at the table's applied offset",
           [({**pipeline, "table": t["name"]}, t["lag_seconds"]) for t in document["tables"]])
    return "\n".join(lines) + "\n"


def _labels(labels: dict) -> str:
    escape = lambda v: str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")  # noqa: E731
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
