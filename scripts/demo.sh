#!/usr/bin/env bash
# The demo end to end: throwaway MariaDB with the shop sample -> Sail -> local Delta tables.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m cdc_sql.dev.demo "$@"
