"""Child process for the capture benchmark: only the capture phase (source to committed bronze),
so its time and peak memory are its own (the engine is started, as a run has it).
`capture_child PIPELINE [CORES]`: run on the first CORES cores only."""
import json
import os
import sys
import time
from contextlib import contextmanager

from cdc_sql import engine as engines
from cdc_sql.config.model import load_pipeline
from cdc_sql.run.runner import Runner
from cdc_sql.source.preflight import inspect_source


@contextmanager
def prepared(path: str):
    """A pipeline's engine started and its bronze tables there, as a run has them: the
    Runner and the source's view; the engine stopped at the end."""
    pipeline = load_pipeline(path)
    engine = engines.start(pipeline.engine.mode, pipeline.engine.url)
    try:
        runner = Runner(pipeline, engine)
        view = inspect_source(pipeline)
        runner.ensure_bronze(view)
        yield runner, view
    finally:
        engine.stop()


def main(path: str) -> None:
    with prepared(path) as (runner, view):
        started = time.perf_counter()
        changes = runner.capture(view, runner.state.load(), view.end)
        print(json.dumps({"changes": changes, "seconds": time.perf_counter() - started}))


if __name__ == "__main__":
    if len(sys.argv) > 2:
        os.sched_setaffinity(0, set(range(int(sys.argv[2]))))
    main(sys.argv[1])
