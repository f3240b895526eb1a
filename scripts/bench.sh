#!/usr/bin/env bash
# Benchmarks (not part of the tests): a stage per goal, each against baselines measured in the
# same invocation, ending with each goal beside its bound. Options: docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m tests.bench "$@"
