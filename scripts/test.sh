#!/usr/bin/env bash
# The test suite (unit, property, integration against private MariaDB servers).
# Slow scale tests are skipped; run them with: scripts/test.sh -m slow
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
