"""Child process for the snapshot benchmark: only the snapshot phase, so peak memory is its own."""
import json
import sys
import time

from cdc_sql import engine as engines
from cdc_sql.config.model import load_pipeline
from cdc_sql.pipeline import Runner
from cdc_sql.source.preflight import inspect_source


def main(path: str) -> None:
    pipeline = load_pipeline(path)
    engine = engines.start(pipeline.engine.mode)
    try:
        runner = Runner(pipeline, engine)
        view = inspect_source(pipeline)
        started = time.perf_counter()
        rows = runner.snapshot(view)
        print(json.dumps({"rows": rows, "seconds": time.perf_counter() - started}))
    finally:
        engine.stop()


if __name__ == "__main__":
    main(sys.argv[1])
