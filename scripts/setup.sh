#!/usr/bin/env bash
# Installs what cdc-sql needs on a fresh Debian machine, idempotently:
# Debian's mariadb-server (for the demo and the tests), and a Python 3.11 venv in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
  echo "setup: installing mariadb-server (Debian package)" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mariadb-server mariadb-client >/dev/null
  # The packaged service is not needed: the demo and tests start private servers.
  $SUDO service mariadb stop >/dev/null 2>&1 || true
fi

PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && \
       "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      PYTHON="$candidate"; break
    fi
  done
fi
[ -n "$PYTHON" ] || { echo "setup: Python 3.11 is required" >&2; exit 1; }

stamp=".venv/.cdc-sql-installed"
wanted="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  echo "setup: creating .venv and installing cdc-sql with its test tools" >&2
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[test]'
  echo "$wanted" > "$stamp"
fi
