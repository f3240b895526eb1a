#!/usr/bin/env bash
# The linter, the test suite (unit, property, integration against private MariaDB servers), then
# the distributed subset again on Sail's local-cluster mode (driver and workers in one process).
# Slow scale tests are skipped; run them with: scripts/test.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check cdc_sql tests udfs  # the linter (pyproject.toml [tool.ruff])
.venv/bin/python -m pytest "$@"
if [ "$#" -eq 0 ]; then
  echo "== the distributed subset on SAIL_MODE=local-cluster"
  SAIL_MODE=local-cluster .venv/bin/python -m pytest -q \
    tests/integration/test_spark_snapshot.py tests/integration/test_end_to_end.py \
    tests/integration/test_capture.py tests/integration/test_history.py \
    tests/integration/test_verify.py tests/integration/test_resnapshot.py
fi
