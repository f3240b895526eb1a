#!/usr/bin/env bash
# Benchmarks (not part of the tests): every stage against its bare baseline, at two sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m tests.bench "$@"
